"""``orchestrate serve``: the HTTP/SSE API over the engine, and the board page.

Needs the ``serve`` extra (``pip install 'agent-orchestrate[serve]'``): FastAPI, uvicorn, httpx.  The
names below are imported on first use, so ``orchestrate --help`` works without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .config import ServeConfig, Webhook

__all__ = ["ServeConfig", "Webhook", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name in ("ServeConfig", "Webhook"):
        from . import config

        return getattr(config, name)
    raise AttributeError(name)
