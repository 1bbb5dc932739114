"""What a caller asks an executor to do."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Task"]


class Task(BaseModel):
    """One run of one agent: the prompt and where and how to run it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str
    cwd: Path = Field(default_factory=Path.cwd)
    model: str | None = None
    resume: str | None = Field(default=None, description="session id to continue")
    fork: bool = Field(default=False, description="with resume: continue in a new session")
    resume_fallback: bool = Field(
        default=False, description="if the resumed session no longer exists, start a fresh one"
    )
    env: dict[str, str] = Field(default_factory=dict, description="overrides, applied last")
    timeout: float | None = Field(default=None, gt=0, description="seconds for the whole run")
    startup_timeout: float | None = Field(
        default=None,
        gt=0,
        description="seconds for the agent's first output; none by then stops the run as timed out",
    )
    approval_timeout: float | None = Field(default=600.0, gt=0, description="seconds per approval")
    raw_log: Path | None = Field(default=None, description="where to write the raw log")
    redact_raw_log: bool = Field(
        default=True,
        description="replace secrets in the raw log with [REDACTED] (off also by ORCHESTRATE_REDACT=0)",
    )
    keep_open: bool = Field(
        default=False,
        description="keep the agent alive when it goes idle, for follow-up messages, until end_input()",
    )
