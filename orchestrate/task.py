"""What a caller asks an executor to do."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Task", "WorkspaceMode", "WorkspaceOptions"]

WorkspaceMode = Literal["here", "worktree", "copy"]


class WorkspaceOptions(BaseModel):
    """How a task's own workspace is made (``Task.workspace`` ``worktree`` or ``copy``); see
    :mod:`orchestrate.workspace`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base: str | None = Field(default=None, description="the ref the worktree starts from (default: HEAD)")
    root: Path | None = Field(
        default=None, description="where workspaces are made (default: $ORCHESTRATE_HOME/workspaces)"
    )
    copy_globs: list[str] = Field(
        default_factory=lambda: [".env*"],
        description="untracked or ignored files of the repository copied in (a glob without / matches a name "
        "at any depth)",
    )
    setup: str | None = Field(
        default=None, description="a shell command run in the workspace before the agent"
    )
    setup_timeout: float = Field(default=600.0, gt=0)
    ports: int = Field(
        default=10, ge=0, le=1000, description="ports reserved for the task (ORCHESTRATE_PORT)"
    )
    keep: bool = Field(default=False, description="`orchestrate workspace clean` leaves it")
    branch_prefix: str = Field(default="orchestrate/", max_length=100)


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
    workspace: WorkspaceMode = Field(
        default="here",
        description="here: run in cwd; worktree: a git worktree of cwd's repository made for the task; "
        "copy: a plain copy of cwd (made by the engine or orchestrate.workspace, not by a bare Run)",
    )
    workspace_options: WorkspaceOptions = Field(default_factory=WorkspaceOptions)
    keep_open: bool = Field(
        default=False,
        description="keep the agent alive when it goes idle, for follow-up messages, until end_input()",
    )
