"""What the store hands out and takes in: plain frozen models, no database types."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..task import Task

__all__ = [
    "LIVE_RUN",
    "TERMINAL",
    "ApprovalRecord",
    "ApprovalStatus",
    "Event",
    "EventKind",
    "Limits",
    "RunRecord",
    "RunStatus",
    "TaskRecord",
    "TaskSpec",
    "TaskStatus",
]

TaskStatus = Literal[
    "queued", "running", "waiting_approval", "done", "failed", "blocked", "cancelled", "lost"
]
TERMINAL: frozenset[str] = frozenset({"done", "failed", "blocked", "cancelled", "lost"})
RunStatus = Literal["running", "done", "failed", "interrupted", "cancelled", "timed_out", "lost"]
LIVE_RUN: frozenset[str] = frozenset({"running"})
EventKind = Literal["raw", "patch", "state", "notice"]
ApprovalStatus = Literal["open", "answered", "withdrawn"]

# The run options a task may carry: the fields of orchestrate.Task that are not set per run.
_PER_RUN = {"prompt", "cwd", "resume", "fork", "resume_fallback", "raw_log"}
RUN_OPTIONS = frozenset(Task.model_fields) - _PER_RUN


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TaskSpec(_Frozen):
    """A task to submit."""

    prompt: str
    executor: str
    executor_options: dict[str, Any] = Field(default_factory=dict, description="orchestrate.ExecutorOptions")
    run_options: dict[str, Any] = Field(
        default_factory=dict,
        description="model, env, timeout, approval_timeout, keep_open (orchestrate.Task)",
    )
    cwd: Path = Field(default_factory=Path.cwd)
    priority: int = 0
    depends_on: list[int] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict, description="the board's own, stored as given")
    max_attempts: int = Field(default=1, ge=1, le=100, description="runs before the task gives up")

    @field_validator("run_options")
    @classmethod
    def _known_run_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = set(value) - RUN_OPTIONS
        if unknown:
            raise ValueError(f"unknown run options {sorted(unknown)}; known: {sorted(RUN_OPTIONS)}")
        Task(prompt="", **value)  # the same validation a run would do, now rather than at run time
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: list[str]) -> list[str]:
        if any(not label or len(label) > 200 for label in value):
            raise ValueError("a label is 1 to 200 characters")
        return sorted(set(value))

    @field_validator("metadata")
    @classmethod
    def _json_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        orjson.dumps(value)  # fails now, with the caller, if it cannot be stored
        return value


class TaskRecord(_Frozen):
    """A task as the store has it, with its runs' token usage and cost summed."""

    id: int
    created_at: float
    updated_at: float
    prompt: str
    executor: str
    executor_options: dict[str, Any]
    run_options: dict[str, Any]
    cwd: Path
    priority: int
    labels: list[str]
    depends_on: list[int]
    metadata: dict[str, Any]
    status: TaskStatus
    reason: str | None
    error: str | None
    error_code: str | None
    notice: str | None
    max_attempts: int
    attempts: int
    session_id: str | None
    cancel_requested: bool
    last_seq: int
    follow_up: bool = False
    attempts_per_turn: int = 1
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    workspace: dict[str, Any] | None = None
    """The workspace made for the task (orchestrate.workspace.WorkspaceInfo); None: it runs in cwd."""
    interrupt_requested: bool = False
    """A client asked to interrupt the current turn; cleared when that turn ends."""

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL


class RunRecord(_Frozen):
    """One attempt or follow-up turn of a task."""

    id: int
    task_id: int
    attempt: int
    parent_run_id: int | None
    kind: str
    status: RunStatus
    created_at: float
    started_at: float | None
    ended_at: float | None
    worker: str | None
    lease_expires_at: float | None
    pid: int | None
    pid_started: str | None
    exit_code: int | None
    outcome: str | None
    error: str | None
    error_code: str | None
    session_id: str | None
    resume_token: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None
    raw_log: str | None
    last_seq: int
    prompt: str | None = None
    """What this run was asked when it is not the task's prompt (a follow-up turn's messages)."""
    checkpoint_start: int | None = None
    """The workspace checkpoint taken before this run's agent started (None: no workspace)."""
    checkpoint_end: int | None = None
    """The workspace checkpoint taken when it ended."""


class ApprovalRecord(_Frozen):
    """A permission request waiting in the store for any client's answer (the first one wins)."""

    id: int
    task_id: int
    run_id: int
    created_at: float
    request: dict[str, Any]
    status: ApprovalStatus
    decision: str | None
    reason: str | None
    answered_by: str | None
    answered_at: float | None
    expires_at: float | None


class Event(_Frozen):
    """One stored event: ``seq`` in its task's sequence, ``run_seq`` in its run's (None for task events).
    ``data`` is the JSON object: a raw log record, an entry patch (camelCase), or a state change."""

    task_id: int
    seq: int
    run_id: int | None
    run_seq: int | None
    ts: float
    kind: EventKind
    data: dict[str, Any]


class Limits(_Frozen):
    """How many runs may be live at once across every worker on the store (None: no limit)."""

    total: int | None = Field(default=None, ge=0)
    per_executor: dict[str, int] = Field(default_factory=dict)
    per_label: dict[str, int] = Field(default_factory=dict)
