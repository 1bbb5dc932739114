"""Approvals that wait in the store: the service the engine installs for a run when its caller gave
none.  Each request becomes an open row any client can answer (``Engine.approve`` / ``deny``,
``orchestrate approve``); the first answer wins (a conditional UPDATE), later ones are told it was
already answered.  The run's approval pipeline (deny rules, session memory, policy) still comes first:
this is the person at the end of it.

Failing closed: a request the store cannot take raises, which the run's ``decide`` turns into a
denial; no answer within the run's ``approval_timeout`` is recorded as ``timed_out`` (a denial that
interrupts the turn); a run that stops waiting (cancelled, ended) withdraws its open requests.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import anyio

from ..approvals.base import ApprovalDecision, ApprovalRequest
from ..store import ApprovalRecord, Store, StoreBusyError, StoreError

__all__ = ["StoreApprovals", "decision_of"]


def decision_of(record: ApprovalRecord, timeout: float | None = None) -> ApprovalDecision:
    """What an answered approval tells the agent (with the details a client gave, kept in the
    request's ``answer`` key by ``Store.answer_approval``)."""
    answer = record.request.get("answer") or {}
    if record.decision == "approved":
        return ApprovalDecision.approve(
            answer.get("updated_input"),
            for_session=bool(answer.get("for_session")),
            scope="mcp_server" if answer.get("scope") == "mcp_server" else "call",
        )
    if record.decision == "timed_out":
        return ApprovalDecision(status="timed_out", reason=record.reason, interrupt=True)
    if record.status == "withdrawn":
        return ApprovalDecision.deny(f"the request was withdrawn: {record.reason}")
    return ApprovalDecision.deny(
        record.reason or f"denied by {record.answered_by}", interrupt=bool(answer.get("interrupt"))
    )


class StoreApprovals:
    """The approval service of one run: store the request, then wait for any process's answer."""

    def __init__(
        self,
        store: Store,
        run_id: int,
        *,
        timeout: float | None,
        poll: float = 0.1,
        on_open: Callable[[ApprovalRecord], None] | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.timeout = timeout
        self.poll = poll
        self.on_open = on_open

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        expires = None if self.timeout is None else time.time() + self.timeout
        body: dict[str, Any] = request.model_dump(mode="json")
        # The row is kept as soon as the store has it: a cancel that lands while the thread opens it
        # (the run layer's own timeout, on a slow store) must still close it, not leave it open.
        box: list[ApprovalRecord] = []
        settled = False
        try:
            await anyio.to_thread.run_sync(
                lambda: box.append(self.store.open_approval(self.run_id, body, expires))
            )
            opened = box[0]
            if self.on_open is not None:
                self.on_open(opened)
            while True:
                record = await self._read(opened.id)
                if record is not None and record.status != "open":
                    settled = True
                    return decision_of(record)
                if expires is not None and time.time() >= expires:
                    # Settled only once the store has the answer: a cancel at this await (the run
                    # layer's timeout, which ends at the same instant) leaves it to the finally.
                    decision = await self._time_out(opened.id)
                    settled = True
                    return decision
                await anyio.sleep(self.poll)
        finally:
            if not settled and box:
                # Cancelled while waiting (the run ended, was cancelled, or the run layer's own
                # approval timeout came first): nobody's answer can reach the agent any more.
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await self._close(box[0].id, expires)

    async def _read(self, approval_id: int) -> ApprovalRecord | None:
        try:
            return await anyio.to_thread.run_sync(self.store.approval, approval_id)
        except StoreBusyError:
            return None  # locked for now: ask again on the next poll

    async def _time_out(self, approval_id: int) -> ApprovalDecision:
        why = f"no answer within {self.timeout:g} s"
        _won, record = await anyio.to_thread.run_sync(
            lambda: self.store.answer_approval(approval_id, "timed_out", why, by="engine (timeout)")
        )
        return decision_of(record)  # whoever answered first, the timeout or a person at that instant

    async def _close(self, approval_id: int, expires: float | None) -> None:
        with contextlib.suppress(StoreError):
            if expires is not None and time.time() >= expires - 0.5:
                await self._time_out(approval_id)
            else:
                await anyio.to_thread.run_sync(
                    self.store.withdraw_approval, approval_id, "the run stopped waiting for it"
                )
