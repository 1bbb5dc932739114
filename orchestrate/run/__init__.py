"""Running agents: the live loop and the handle a caller holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .handle import Run
    from .result import EXIT_CODES, Outcome, RunResult

__all__ = ["EXIT_CODES", "Outcome", "Run", "RunResult"]

# Imported when first asked for (PEP 562): the result model pulls in the entry models, which a run
# needs only once the agent has started (see handle.py).
_WHERE = {"Run": ".handle", "EXIT_CODES": ".result", "Outcome": ".result", "RunResult": ".result"}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals(), __all__)
