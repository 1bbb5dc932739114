"""The API's request and response bodies (the OpenAPI document is generated from these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..store import ApprovalRecord, RunRecord, TaskRecord
from ..workspace import Checkpoint, FileChange

__all__ = [
    "Answer",
    "CheckpointInfo",
    "Checkpoints",
    "CommitRequest",
    "CommitResult",
    "Created",
    "DiffResult",
    "EntriesOfRun",
    "ExecutorInfo",
    "FollowUp",
    "FollowUpResult",
    "NewTask",
    "RemovedWorkspace",
    "RollbackResult",
    "TaskDetail",
    "TaskPage",
    "WorkspaceRequest",
]

EXECUTOR_NAME = r"^[a-z0-9][a-z0-9._-]{0,99}$"
# A ref as a person types it (main, v1.2, origin/main, HEAD~2, a commit): never an option, never a
# range; git resolves it (after --end-of-options) when the task is created.
GIT_REF = r"^[A-Za-z0-9._/@^~+][A-Za-z0-9._/@^~+-]{0,199}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkspaceRequest(_Strict):
    """How the task's workspace is made (orchestrate.WorkspaceOptions, less what the server
    decides: where workspaces go, the branch prefix, the ports)."""

    base: str | None = Field(
        default=None, pattern=GIT_REF, description="worktree: the ref it starts from (default: HEAD)"
    )
    setup: str | None = Field(
        default=None,
        min_length=1,
        max_length=10_000,
        description="a shell command run in the new workspace before the agent (only when the server "
        "allows commands)",
    )
    setup_timeout: float = Field(default=600.0, gt=0, le=3600)
    copy_globs: list[str] | None = Field(
        default=None,
        max_length=50,
        description="untracked or ignored files of the repository copied in (default: .env*)",
    )
    keep: bool = Field(default=False, description="`orchestrate workspace clean` leaves it")

    @field_validator("base")
    @classmethod
    def _one_ref(cls, value: str | None) -> str | None:
        if value is not None and ".." in value:
            raise ValueError("base is one ref, not a range")
        return value

    @field_validator("copy_globs")
    @classmethod
    def _globs(cls, value: list[str] | None) -> list[str] | None:
        for glob in value or []:
            parts = glob.strip("/").split("/")
            if not 0 < len(glob) <= 200 or "\0" in glob or glob.startswith("/") or ".." in parts:
                raise ValueError(f"{glob!r} is not a glob of files inside the repository")
        return value


class NewTask(_Strict):
    """A task to queue.  ``cwd`` is an absolute path to an existing directory (under the server's
    ``roots`` when it has some).  ``workspace``: ``here`` runs in ``cwd``; ``worktree`` in a new git
    worktree and branch of the repository holding ``cwd`` (the whole repository under the roots);
    ``copy`` in a plain copy of ``cwd``."""

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
    workspace: Literal["here", "worktree", "copy"] = "here"
    workspace_options: WorkspaceRequest | None = Field(default=None, description="with worktree or copy")

    @model_validator(mode="after")
    def _workspace(self) -> NewTask:
        if self.workspace == "here" and self.workspace_options is not None:
            raise ValueError("workspace_options go with workspace worktree or copy")
        if self.workspace == "copy" and self.workspace_options and self.workspace_options.base:
            raise ValueError("base goes with workspace worktree (a copy starts from the files as they are)")
        return self


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


# --- workspaces --------------------------------------------------------------------------------------


class CheckpointInfo(BaseModel):
    """A checkpoint (``id`` counts up from 1 in the task's workspace; paths and the API name it by
    that number) and the turn it was taken around."""

    id: int
    commit: str
    created_at: float
    label: str
    turn: int | None = Field(description="the task's Nth run this was taken before or after (null: neither)")
    run_id: int | None
    moment: Literal["start", "end"] | None = Field(description="before the turn's agent, or after it")

    @classmethod
    def of(cls, point: Checkpoint, turns: dict[int, tuple[int, int, str]]) -> CheckpointInfo:
        turn, run_id, moment = turns.get(point.id, (None, None, None))
        return cls(
            id=point.id,
            commit=point.commit,
            created_at=point.created_at,
            label=point.label,
            turn=turn,
            run_id=run_id,
            moment=moment,  # type: ignore[arg-type]
        )


class Checkpoints(BaseModel):
    task_id: int
    mode: Literal["worktree", "copy"]
    path: str = Field(description="the workspace's directory")
    branch: str
    base: str = Field(description="the commit the workspace started from")
    checkpoints: list[CheckpointInfo] = Field(description="oldest first")


class DiffResult(BaseModel):
    """Per-file unified diffs (git's format, ``a/`` and ``b/`` prefixes; none for a binary file)."""

    task_id: int
    start: str = Field(description="a checkpoint number, or base")
    end: str = Field(description="a checkpoint number, or now (the files as they are)")
    turn: int | None
    files: list[FileChange]
    additions: int
    deletions: int
    truncated: bool = Field(
        description="some file's diff was cut (that file's own truncated says so) or left out: the "
        "response holds at most a bounded amount of diff text"
    )
    omitted_files: int = Field(description="changed files past the response's limit, not listed")


class RollbackResult(BaseModel):
    task_id: int
    to: str
    saved: Checkpoint = Field(description="the files as they were just before: roll back to it to undo")


class Author(_Strict):
    name: str = Field(min_length=1, max_length=200, pattern=r"^[^<>\n\r\x00]+$")
    email: str = Field(min_length=3, max_length=320, pattern=r"^[^<>\s\x00]+@[^<>\s\x00]+$")


class CommitRequest(_Strict):
    message: str = Field(min_length=1, max_length=100_000)
    author: Author | None = Field(default=None, description="default: the repository's configuration")

    @field_validator("message")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip() or "\0" in value:
            raise ValueError("a commit needs a message")
        return value


class CommitResult(BaseModel):
    task_id: int
    branch: str
    commit: str | None = Field(description="null: the files were already as the branch has them")


class RemovedWorkspace(BaseModel):
    task_id: int
    path: str
    branch: str
    branch_kept: bool = Field(description="the branch stays when it holds commits beyond its base")
