"""Tasks and runs: create, list (filters, paging), get, cancel, retry, follow-up; runs and their
entries; stored events as plain JSON pages."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam

from ..errors import OrchestrateError
from ..executors.base import ExecutorOptions
from ..registry import default_registry
from ..store import Event, RunRecord, TaskRecord, TaskSpec
from ..store.records import TaskStatus
from . import workspaces
from .errors import ApiError
from .models import Created, EntriesOfRun, FollowUp, FollowUpResult, NewTask, TaskDetail, TaskPage
from .state import Services, services

__all__ = ["ID", "router"]

router = APIRouter(prefix="/api", tags=["tasks"])

MAX_ID = 2**62
ID = Annotated[int, PathParam(ge=1, le=MAX_ID, description="a positive integer id")]
Svc = Annotated[Services, Depends(services)]
WORKSPACE_KEYS = frozenset({"workspace", "workspace_options"})


_CREATE_ERRORS: dict[int | str, dict[str, Any]] = {
    403: {"description": "error codes: forbidden (a command or environment the server does not allow)"},
    404: {"description": "error codes: not_found (a task it depends on)"},
    422: {"description": "error codes: invalid_request, not_a_git_repository (workspace worktree)"},
    503: {"description": "error codes: workspace_unavailable (no git on the server), store_busy"},
}


@router.post("/tasks", status_code=201, response_model=Created, responses=_CREATE_ERRORS)
async def create_task(body: NewTask, svc: Svc) -> Created:
    """Queue a task for the engine (this server's worker, or any worker on the store)."""
    config = svc.config
    cwd = _working_directory(body.cwd, config.roots)
    _check_commands(body, config.allow_commands)
    if WORKSPACE_KEYS & set(body.run_options):
        raise ApiError(
            "invalid_request", "a task's workspace is its `workspace` and `workspace_options` fields"
        )
    run_options = dict(body.run_options)
    try:
        if body.workspace != "here":
            run_options |= workspaces.workspace_run_options(
                body.workspace, body.workspace_options, config.workspace_root
            )
        options = ExecutorOptions(**body.executor_options)
        default_registry.get(body.executor)  # an unknown executor fails now, not in a worker
        spec = TaskSpec(
            prompt=body.prompt,
            executor=body.executor,
            executor_options=options.model_dump(mode="json", exclude_defaults=True),
            run_options=run_options,
            cwd=cwd,
            priority=body.priority,
            depends_on=body.depends_on,
            labels=body.labels,
            metadata=body.metadata,
            max_attempts=body.max_attempts,
        )
    except (OrchestrateError, ValueError, TypeError) as exc:
        raise ApiError("invalid_request", str(exc)) from exc
    if body.workspace != "here":
        # Git is asked in a thread; its refusals have their own codes (errors.from_workspace).
        mode, made = body.workspace, run_options["workspace_options"]
        await svc.call(lambda: workspaces.check_new_workspace(mode, cwd, config.roots, made))
    task = await svc.engine.submit(**_spec_args(spec))
    return Created(task=task)


def _spec_args(spec: TaskSpec) -> dict[str, Any]:
    return spec.model_dump() | {"cwd": spec.cwd}


def _working_directory(value: str, roots: list[Path]) -> Path:
    path = Path(value)
    if not path.is_absolute() or "\0" in value:
        raise ApiError("invalid_request", "cwd must be an absolute path")
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise ApiError("invalid_request", f"cwd {value!r} does not exist") from exc
    if not real.is_dir():
        raise ApiError("invalid_request", f"cwd {value!r} is not a directory")
    if roots and not any(real.is_relative_to(root.resolve()) for root in roots):
        raise ApiError("invalid_request", f"cwd {value!r} is outside the directories this server allows")
    return real


# The executor options a client may set on a server without --allow-commands: none of them names a
# program.  Every other option can (base_command and env directly; extra_args and config as the CLI's
# own flags, e.g. Claude's `--settings` hooks or Codex's `-c mcp_servers.x.command=...`; mcp_servers as
# the servers an agent starts), and so can any option added later: an allowlist, not a denylist.
SAFE_EXECUTOR_OPTIONS = frozenset(
    {"model", "permission_mode", "sandbox", "approval_policy", "stable_seconds"}
)


def _check_commands(body: NewTask, allowed: bool) -> None:
    if allowed:
        return
    named = sorted(
        k
        for k, v in body.executor_options.items()
        if k not in SAFE_EXECUTOR_OPTIONS and v not in (None, [], {})
    )
    if body.run_options.get("env"):
        named.append("run_options.env")
    if body.workspace_options is not None and body.workspace_options.setup is not None:
        named.append("workspace_options.setup")
    if named:
        raise ApiError(
            "forbidden",
            f"this server does not let a task name its own commands or environment ({', '.join(named)}); "
            "start it with --allow-commands",
        )


@router.get("/tasks", response_model=TaskPage)
async def list_tasks(
    svc: Svc,
    status: Annotated[list[TaskStatus] | None, Query()] = None,
    label: Annotated[str | None, Query(max_length=200)] = None,
    executor: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after_id: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> TaskPage:
    """Tasks in id order (oldest first) after ``after_id``; filter by status (repeatable), label,
    executor."""
    found = await svc.engine.list(
        status=status or None, label=label, executor=executor, limit=limit, after_id=after_id
    )
    return TaskPage(tasks=found, next_after_id=found[-1].id if len(found) == limit else None)


@router.get("/tasks/{task_id}", response_model=TaskDetail)
async def get_task(task_id: ID, svc: Svc) -> TaskDetail:
    """A task with its runs, follow-up messages and approvals."""
    store = svc.store
    task = await svc.engine.get(task_id)
    runs = await svc.engine.runs(task_id)
    messages = await svc.call(lambda: store.messages(task_id))
    approvals = await svc.engine.approvals(task_id, status=None)
    return TaskDetail(task=task, runs=runs, messages=messages, approvals=approvals)


@router.post("/tasks/{task_id}/cancel", response_model=TaskRecord)
async def cancel_task(task_id: ID, svc: Svc) -> TaskRecord:
    """Cancel: a queued task at once, a running one by its worker (``cancel_requested``)."""
    return await svc.engine.cancel(task_id)


@router.post("/tasks/{task_id}/interrupt", response_model=TaskRecord)
async def interrupt_task(task_id: ID, svc: Svc) -> TaskRecord:
    """Interrupt the running turn (not the task) by its worker (``interrupt_requested``); waiting
    follow-up messages are the next turn.  409 when no turn is running."""
    return await svc.engine.interrupt(task_id)


@router.post("/tasks/{task_id}/retry", response_model=TaskRecord)
async def retry_task(task_id: ID, svc: Svc) -> TaskRecord:
    """Queue a task that ended without success for one more attempt (409 otherwise)."""
    return await svc.engine.retry(task_id)


@router.post("/tasks/{task_id}/messages", response_model=FollowUpResult)
async def follow_up(task_id: ID, body: FollowUp, svc: Svc) -> FollowUpResult:
    """A follow-up message: a new turn in the agent's session, now if the task has ended, else
    when its current turn ends."""
    store = svc.store
    # Through the store (not Engine.send) for the message's id; the worker sees it on its next poll.
    task, message_id, starts = await svc.call(lambda: store.send(task_id, body.text))
    return FollowUpResult(task=task, message_id=message_id, starts_now=starts)


@router.get("/tasks/{task_id}/runs", response_model=list[RunRecord])
async def task_runs(task_id: ID, svc: Svc) -> list[RunRecord]:
    await svc.engine.get(task_id)  # 404 for no such task, not an empty list
    return await svc.engine.runs(task_id)


@router.get("/runs/{run_id}", response_model=RunRecord)
async def get_run(run_id: ID, svc: Svc) -> RunRecord:
    store = svc.store
    return await svc.call(lambda: store.run(run_id))


@router.get("/runs/{run_id}/entries", response_model=EntriesOfRun)
async def run_entries(run_id: ID, svc: Svc) -> EntriesOfRun:
    """The run's entries as its patches leave them (what ``orchestrate show --json`` gives)."""
    store = svc.store
    await svc.call(lambda: store.run(run_id))
    entries: dict[int, Any] = {}
    after = 0
    while True:
        read = functools.partial(store.events, run_id=run_id, after=after, limit=1000)
        page = await svc.call(read)
        for event in page:
            if event.kind == "patch":
                entries[event.data["index"]] = event.data["entry"]
        if len(page) < 1000:
            break
        after = page[-1].run_seq or after
    return EntriesOfRun(run_id=run_id, entries=[entries[i] for i in sorted(entries)])


@router.get("/tasks/{task_id}/events", response_model=list[Event])
async def task_events(
    task_id: ID,
    svc: Svc,
    after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[Event]:
    """Stored events after ``seq`` ``after`` (a page; the stream is ``/api/tasks/{id}/stream``)."""
    await svc.engine.get(task_id)
    store = svc.store
    return await svc.call(lambda: store.events(task_id=task_id, after=after, limit=limit))
