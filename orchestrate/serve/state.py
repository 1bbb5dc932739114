"""What the routes share: the engine, the feeds, the executors' availability, the settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from fastapi import Request

from ..engine import Engine
from ..store import Store
from .config import ServeConfig
from .feeds import FeedHub

__all__ = ["Services", "services"]

T = TypeVar("T")


@dataclass
class Services:
    config: ServeConfig
    engine: Engine
    tasks: FeedHub[int]
    board: FeedHub[int]
    executors: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each executor's availability, filled in the background (see routes_misc.availability)."""
    check_executors: Callable[[], None] = lambda: None
    streams: int = 0
    """Event streams open now (bounded by ``config.max_streams``)."""
    webhooks: Any = None

    def start_checks(self) -> None:
        """Check the executors' availability again, in the background."""
        self.check_executors()

    @property
    def store(self) -> Store:
        return self.engine.store

    async def call(self, fn: Callable[[], T]) -> T:
        """A store call, off the event loop."""
        return await anyio.to_thread.run_sync(fn)


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found
