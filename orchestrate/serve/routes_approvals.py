"""Approvals waiting in the store, answered from any client: the first answer wins (the store's
conditional UPDATE), every later one gets 409 ``already_answered`` with the answer that stands.  An
answer is one request: a client that vanishes half-way has answered nothing."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from ..store import AlreadyAnsweredError, ApprovalRecord
from .models import Answer
from .routes_tasks import ID, MAX_ID
from .state import Services, services

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["approvals"])
Svc = Annotated[Services, Depends(services)]


@router.get("/approvals", response_model=list[ApprovalRecord])
async def list_approvals(
    svc: Svc,
    task_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    status: Annotated[Literal["open", "answered", "withdrawn", "any"], Query()] = "open",
) -> list[ApprovalRecord]:
    """Approvals (open ones by default), of one task or all."""
    return await svc.engine.approvals(task_id, status=None if status == "any" else status)


@router.get("/approvals/{approval_id}", response_model=ApprovalRecord)
async def get_approval(approval_id: ID, svc: Svc) -> ApprovalRecord:
    store = svc.store
    return await svc.call(lambda: store.approval(approval_id))


@router.post(
    "/approvals/{approval_id}",
    response_model=ApprovalRecord,
    responses={409: {"description": "already answered (or withdrawn): the body says how"}},
)
async def answer(approval_id: ID, body: Answer, request: Request, svc: Svc) -> ApprovalRecord:
    """Approve (``updated_input``: run this input instead; ``for_session``: allow the same call from
    now on) or deny (``reason`` for the agent; ``interrupt``: stop its turn too)."""
    store = svc.store
    decision = "approved" if body.decision == "approve" else "denied"
    details: dict[str, Any] = {}
    if body.updated_input is not None:
        details["updated_input"] = body.updated_input
    if body.for_session:
        details |= {"for_session": True, "scope": body.scope}
    if body.interrupt:
        details["interrupt"] = True
    client = request.client.host if request.client else "unknown"
    by = f"{body.by or 'http'} ({client})"
    reason = body.reason if body.reason is not None or decision == "approved" else "denied by the user"
    won, record = await svc.call(
        lambda: store.answer_approval(approval_id, decision, reason, by=by, answer=details or None)
    )
    if not won:
        raise AlreadyAnsweredError(record)
    return record
