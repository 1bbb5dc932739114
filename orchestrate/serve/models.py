"""The API's request and response bodies (the OpenAPI document is generated from these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..store import ApprovalRecord, RunRecord, TaskRecord

__all__ = [
    "Answer",
    "Created",
    "EntriesOfRun",
    "ExecutorInfo",
    "FollowUp",
    "FollowUpResult",
    "NewTask",
    "TaskDetail",
    "TaskPage",
]

EXECUTOR_NAME = r"^[a-z0-9][a-z0-9._-]{0,99}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NewTask(_Strict):
    """A task to queue.  ``cwd`` is an absolute path to an existing directory (under the server's
    ``roots`` when it has some)."""

    prompt: str = Field(min_length=1, max_length=200_000)
    executor: str = Field(pattern=EXECUTOR_NAME)
    cwd: str = Field(min_length=1, max_length=4096)
    executor_options: dict[str, Any] = Field(
        default_factory=dict,
        description="orchestrate.ExecutorOptions (model, permission_mode, ...); base_command and env "
        "only when the server allows commands",
    )
    run_options: dict[str, Any] = Field(
        default_factory=dict, description="timeout, approval_timeout, ... (orchestrate.Task)"
    )
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    depends_on: list[int] = Field(default_factory=list, max_length=100)
    labels: list[str] = Field(default_factory=list, max_length=50)
    metadata: dict[str, Any] = Field(default_factory=dict)
    max_attempts: int = Field(default=1, ge=1, le=100)
    worktree: bool = Field(default=False, description="run in a git worktree of its own (workspace layer)")


class Answer(_Strict):
    """An answer to a waiting approval: approve (optionally with changed input, optionally for the
    rest of the session), or deny (with a reason; ``interrupt`` also stops the agent's turn)."""

    decision: Literal["approve", "deny"]
    reason: str | None = Field(default=None, max_length=10_000)
    updated_input: Any = Field(default=None, description="approve: the tool input to run instead")
    for_session: bool = Field(default=False, description="approve: the same call is allowed from now on")
    scope: Literal["call", "mcp_server"] = "call"
    interrupt: bool = Field(default=False, description="deny: stop the agent's turn too")
    by: str | None = Field(default=None, max_length=200, description="who answers (default: the client)")

    @model_validator(mode="after")
    def _consistent(self) -> Answer:
        if self.decision == "approve" and self.interrupt:
            raise ValueError("interrupt goes with deny")
        if self.decision == "deny" and (self.for_session or self.updated_input is not None):
            raise ValueError("for_session and updated_input go with approve")
        return self


class FollowUp(_Strict):
    text: str = Field(min_length=1, max_length=200_000)


class FollowUpResult(BaseModel):
    task: TaskRecord
    message_id: int
    starts_now: bool


class Created(BaseModel):
    task: TaskRecord


class TaskPage(BaseModel):
    tasks: list[TaskRecord]
    next_after_id: int | None = Field(description="pass as after_id for the next page; null at the end")


class TaskDetail(BaseModel):
    task: TaskRecord
    runs: list[RunRecord]
    messages: list[dict[str, Any]]
    approvals: list[ApprovalRecord]


class EntriesOfRun(BaseModel):
    run_id: int
    entries: list[dict[str, Any]] = Field(description="NormalizedEntry JSON (camelCase), by index")


class ExecutorInfo(BaseModel):
    name: str
    protocol: str
    installed: bool | None = Field(description="null while its availability is being checked")
    version: str | None
    path: str | None
    reason: str | None
    capabilities: dict[str, Any]
