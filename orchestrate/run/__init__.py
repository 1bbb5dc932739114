"""Running agents: the live loop and the handle a caller holds."""

from __future__ import annotations

from .handle import Run
from .result import EXIT_CODES, Outcome, RunResult

__all__ = ["EXIT_CODES", "Outcome", "Run", "RunResult"]
