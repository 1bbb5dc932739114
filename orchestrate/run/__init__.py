"""Running agents: the live loop and the handle a caller holds."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .handle import Run
    from .result import EXIT_CODES, Outcome, RunResult

__all__ = ["EXIT_CODES", "Outcome", "Run", "RunResult"]

# Imported when first asked for (PEP 562): the result model pulls in the entry models, which a run
# needs only once the agent has started (see handle.py).
_WHERE = {"Run": ".handle", "EXIT_CODES": ".result", "Outcome": ".result", "RunResult": ".result"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
