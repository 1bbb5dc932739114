"""A task's workspace: its checkpoints (with the turn each was taken around), its diff (the whole
task, between two checkpoints, or one turn), rollback to a checkpoint, a commit of its files on its
branch, and removal.

A checkpoint is named by its number (1, 2, ... in the task's workspace), as the engine API and
``orchestrate rollback --to N`` name it, or ``base`` (where the workspace started); a diff's end may
also be ``now`` (the files as they are).  Nothing a client sends reaches git but those validated
numbers and words."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam

from . import workspaces as ops
from .errors import CODES, ApiError
from .models import (
    CheckpointInfo,
    Checkpoints,
    CommitRequest,
    CommitResult,
    DiffResult,
    RemovedWorkspace,
    RollbackResult,
)
from .routes_tasks import ID
from .state import Services, services

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["workspace"])
Svc = Annotated[Services, Depends(services)]

POINT = r"^(base|now|[1-9][0-9]{0,8})$"
CHECKPOINT = Annotated[
    str,
    PathParam(pattern=r"^(base|[1-9][0-9]{0,8})$", description="a checkpoint's number, or base"),
]


def _doc(*codes: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI responses of a route: each status with the error codes it carries."""
    by_status: dict[int, list[str]] = {}
    for code in (
        "not_found",
        "invalid_request",
        "no_workspace",
        *codes,
        "git_error",
        "workspace_unavailable",
    ):
        by_status.setdefault(CODES[code], []).append(code)
    return {
        status: {"description": "error codes: " + ", ".join(names)} for status, names in by_status.items()
    }


@router.get("/tasks/{task_id}/checkpoints", response_model=Checkpoints, responses=_doc())
async def checkpoints(task_id: ID, svc: Svc) -> Checkpoints:
    """The task's checkpoints, oldest first, each with the turn it was taken before or after."""
    task = await svc.engine.get(task_id)
    ws = await svc.call(lambda: ops.open_task_workspace(task))
    found = await svc.engine.checkpoints(task_id)
    turns = ops.turns_of(await svc.engine.runs(task_id))
    info = ws.info
    return Checkpoints(
        task_id=task_id,
        mode=info.mode,
        path=str(info.path),
        branch=info.branch,
        base=info.base,
        checkpoints=[CheckpointInfo.of(c, turns) for c in found],
    )


@router.get(
    "/tasks/{task_id}/diff",
    response_model=DiffResult,
    responses=_doc("checkpoint_not_found", "turn_not_found"),
)
async def diff(
    task_id: ID,
    svc: Svc,
    start: Annotated[str, Query(pattern=POINT, description="a checkpoint number, base")] = "base",
    end: Annotated[str, Query(pattern=POINT, description="a checkpoint number, base, now")] = "now",
    turn: Annotated[int | None, Query(ge=1, le=1_000_000, description="what the Nth run changed")] = None,
) -> DiffResult:
    """Per-file unified diffs: everything the task changed (base to now), between two checkpoints,
    or in one turn (while that turn runs: what it has changed so far)."""
    task = await svc.engine.get(task_id)
    ws = await svc.call(lambda: ops.open_task_workspace(task))
    if turn is not None:
        if (start, end) != ("base", "now"):
            raise ApiError("invalid_request", "give turn, or start and end, not both")
        start, end = ops.turn_bounds(task_id, await svc.engine.runs(task_id), turn)
    await svc.call(lambda: ops.existing_checkpoint(ws, [start, end]))
    changes = await svc.engine.diff(task_id, start, end)
    files, truncated, omitted = ops.bound_diff(changes)
    return DiffResult(
        task_id=task_id,
        start=start,
        end=end,
        turn=turn,
        files=files,
        additions=sum(c.additions for c in changes),
        deletions=sum(c.deletions for c in changes),
        truncated=truncated,
        omitted_files=omitted,
    )


@router.post(
    "/tasks/{task_id}/rollback/{checkpoint}",
    response_model=RollbackResult,
    responses=_doc("checkpoint_not_found", "workspace_in_use", "workspace_error"),
)
async def rollback(task_id: ID, checkpoint: CHECKPOINT, svc: Svc) -> RollbackResult:
    """Put the task's files back as ``checkpoint`` had them (files added since removed, changed and
    deleted ones restored, ignored ones left alone); refused while the task runs.  The files as they
    were are kept as a new checkpoint first (``saved``): roll back to it to undo."""
    task = await svc.engine.get(task_id)
    ws = await svc.call(lambda: ops.open_task_workspace(task))
    await svc.call(lambda: ops.existing_checkpoint(ws, [checkpoint]))
    saved = await svc.engine.rollback(task_id, checkpoint)  # WorkspaceInUseError: workspace_in_use
    return RollbackResult(task_id=task_id, to=checkpoint, saved=saved)


@router.post(
    "/tasks/{task_id}/commit",
    response_model=CommitResult,
    responses=_doc("workspace_in_use", "workspace_error"),
)
async def commit(task_id: ID, body: CommitRequest, svc: Svc) -> CommitResult:
    """Commit the task's files as they are on its branch, for you to merge or push (``commit`` null:
    nothing to commit); refused while the task runs."""
    store = svc.store
    author = (body.author.name, body.author.email) if body.author else None
    ws, made = await svc.call(lambda: ops.commit_task(store, task_id, body.message, author))
    return CommitResult(task_id=task_id, branch=ws.info.branch, commit=made)


@router.delete(
    "/tasks/{task_id}/workspace",
    response_model=RemovedWorkspace,
    responses=_doc("workspace_in_use", "workspace_error"),
)
async def remove_workspace(task_id: ID, svc: Svc) -> RemovedWorkspace:
    """Remove the task's workspace and its checkpoints (never while a run uses it); its branch stays
    if it holds commits beyond its base.  A follow-up afterwards starts in a new workspace."""
    store = svc.store
    ws, kept = await svc.call(lambda: ops.remove(store, task_id))
    return RemovedWorkspace(task_id=task_id, path=str(ws.path), branch=ws.info.branch, branch_kept=kept)
