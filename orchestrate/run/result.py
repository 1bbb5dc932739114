"""What a finished run reports."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, model_validator

from ..entries import NormalizedEntry, TokenUsage, ToolUseEntry
from .failure import Failure
from .tally import EntryTally

__all__ = ["EXIT_CODES", "Outcome", "RunResult"]

Outcome = Literal["success", "failed", "interrupted", "cancelled", "timed_out"]

# The CLI's documented exit codes, by outcome (2 and 3 are usage and availability errors).
EXIT_CODES: dict[Outcome, int] = {
    "success": 0,
    "failed": 1,
    "timed_out": 1,
    "interrupted": 130,
    "cancelled": 130,
}


class RunResult(BaseModel):
    """How a run ended, what it made, and the figures of all its entries.

    ``entries`` and ``tool_results`` are every entry and tool call of the run, unless it was run
    with ``streaming=True`` (``Run(..., streaming=True)``, for a caller that takes the patches as
    they come): then they are only what its normalizer still held at the end, the last entries (a
    window, :data:`~orchestrate.normalizers.base.DEFAULT_WINDOW` by default) and the tool calls
    still open, as ``normalizer.entries`` after a streaming replay.  The figures (``token_usage``,
    ``reported_usage``, ``error``, ``failure``, ``entry_count``, ``approvals_timed_out``) are the
    whole run's either way: the run folds each entry into them as it lets it go (run/tally.py)."""

    model_config = ConfigDict(frozen=True)

    outcome: Outcome
    exit_code: int | None
    """The agent process's own exit code (negative: killed by that signal)."""
    session_id: str | None
    entries: list[NormalizedEntry]
    tool_results: list[ToolUseEntry]
    token_usage: TokenUsage
    raw_log: Path | None
    stderr_tail: str = ""
    error: str | None = None
    """The last error entry's message."""
    entry_count: int = 0
    """How many entries the run made (their indexes are 0 to ``entry_count - 1``): more than
    ``len(entries)`` when a streaming run let some go."""
    reported_usage: TokenUsage | None = None
    """The usage the agent reported, all turns together, leaving out turns that reported nothing
    (``token_usage`` counts those as zeros; the context window here is the last one a report
    named); None if it reported none."""
    approvals_timed_out: int = 0
    """Tool calls whose approval timed out (nobody answered in time)."""
    failure: Failure | None = None
    """Why the run failed, when the agent's words say: the model unreachable, rate limited, the
    credentials refused (run/failure.py); None for a success or another failure."""

    @model_validator(mode="after")
    def _figures_from_entries(self) -> Self:
        """A result built by hand (a test's) gets the figures it was not given from its entries;
        a run gives every one of them."""
        missing = _FIGURES - self.model_fields_set
        if missing:
            tally = EntryTally()
            for entry in self.entries:
                tally.see(entry)
            figures = {
                "entry_count": tally.count,
                "reported_usage": tally.reported_usage(),
                "approvals_timed_out": tally.approvals_timed_out,
                "failure": tally.failure(self.outcome, self.stderr_tail),
            }
            for name in missing:
                object.__setattr__(self, name, figures[name])  # (frozen: set as it is made)
        return self

    @property
    def cli_exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    @property
    def final_text(self) -> str:
        """The last assistant message, which is usually the answer."""
        for entry in reversed(self.entries):
            if entry.type.kind == "assistant_message":
                return entry.content
        return ""


_FIGURES = frozenset({"entry_count", "reported_usage", "approvals_timed_out", "failure"})
