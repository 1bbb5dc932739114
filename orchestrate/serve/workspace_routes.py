"""WORKSPACE: checkpoints, diff and rollback of a task's worktree.

These routes are the places the workspace layer (issue 11, built beside this one) plugs into: until
the lead wires it in, each answers 501 with the stable code ``workspace_unavailable``, so a board can
tell "not in this build" from "this task has no worktree" (which will be 404 ``not_found``) and hide
its diff and checkpoint views.  To wire it: replace each body with a call into the workspace layer,
keeping the paths, the id validation and the auth (the middleware covers every route already).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi import Path as PathParam

from .errors import ApiError
from .routes_tasks import ID
from .state import Services, services

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["workspace"])
Svc = Annotated[Services, Depends(services)]
CHECKPOINT = Annotated[str, PathParam(pattern=r"^[0-9a-f]{7,64}$", description="a checkpoint's commit id")]
_501: dict[int | str, dict[str, Any]] = {
    501: {"description": "the workspace layer is not in this build (code workspace_unavailable)"}
}


def _unavailable() -> ApiError:
    return ApiError("workspace_unavailable", "checkpoints, diffs and rollback need the workspace layer")


@router.get("/tasks/{task_id}/checkpoints", responses=_501)
async def checkpoints(task_id: ID, svc: Svc) -> None:
    """The task's worktree checkpoints, oldest first."""
    await svc.engine.get(task_id)
    raise _unavailable()


@router.get("/tasks/{task_id}/diff", responses=_501)
async def diff(task_id: ID, svc: Svc) -> None:
    """The task's worktree against its base, as a unified diff."""
    await svc.engine.get(task_id)
    raise _unavailable()


@router.post("/tasks/{task_id}/rollback/{checkpoint}", responses=_501)
async def rollback(task_id: ID, checkpoint: CHECKPOINT, svc: Svc) -> None:
    """Put the task's worktree back to ``checkpoint``."""
    await svc.engine.get(task_id)
    raise _unavailable()
