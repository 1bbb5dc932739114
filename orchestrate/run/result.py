"""What a finished run reports."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..entries import NormalizedEntry, TokenUsage, ToolUseEntry

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
