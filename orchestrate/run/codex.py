"""The Codex app-server driver: handshake, thread, turns, approvals, interrupt, over JSON-RPC."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..approvals.base import ApprovalDecision, decide
from ..executors.codex import CodexExecutor
from ..peers.codex_opening import codex_peer, open_codex
from ..peers.jsonrpc import IncomingRequest
from ..wire.lines import WireLine
from ..wire.notes import ApprovalWithdrawn
from .driver import Driver, DriverContext
from .jsonrpc import JsonRpcConnection, is_handshake

__all__ = ["CodexDriver"]

_HANDSHAKE_TIMEOUT = 30.0
_CALL_TIMEOUT = 60.0
_NOTICED = frozenset(
    {"turn/started", "item/started", "item/completed", "serverRequest/resolved", "turn/completed"}
)
MAX_OPEN_ITEMS = 256
"""Commands and file changes a driver keeps for the approvals to come (an approval reads its item):
each is let go when it completes, and past this many still open the oldest goes first (an agent
that never completes its items cannot grow the table, whole-file diffs included)."""
_APPROVALS = ("item/commandExecution/requestApproval", "item/fileChange/requestApproval")


class CodexDriver(Driver[CodexExecutor]):
    def __init__(self, ctx: DriverContext[CodexExecutor]) -> None:
        super().__init__(ctx)
        self.executor = ctx.executor
        self.conn = JsonRpcConnection(
            codex_peer(),
            ctx.process,
            ctx.task_group,
            handlers=dict.fromkeys(_APPROVALS, self._approve),
            on_notification=self._notified,
        )
        self.thread_id: str | None = None
        self.turn_id: str | None = None
        self.turn_active = False
        self.queued: list[str] = []
        self._items: dict[str, dict[str, Any]] = {}

    async def start(self, prompt: str) -> None:
        # initialize (peers/codex_opening.py: the early start's code too), its answer awaited
        # before anything else is sent, as Codex's own client does.
        await self.conn.handshake(open_codex, _HANDSHAKE_TIMEOUT)
        await self.conn.notify("initialized")
        method, thread_params = self.executor.thread_request(self.ctx.task)
        result = await self.conn.call(method, thread_params, _CALL_TIMEOUT)
        self.thread_id = str(result["thread"]["id"])
        await self._start_turn(prompt)

    async def _start_turn(self, text: str) -> None:
        self.turn_active = True
        self.set_idle(False)
        params = {"threadId": self.thread_id, "input": [{"type": "text", "text": text, "text_elements": []}]}
        result = await self.conn.call("turn/start", params, _CALL_TIMEOUT)
        self.turn_id = str(result["turn"]["id"])

    @classmethod
    def takes_opening(cls, opening: object) -> bool:
        return is_handshake(opening, open_codex)

    def take_opening(self, opening: object) -> None:
        if not self.takes_opening(opening):
            super().take_opening(opening)
        self.conn.take_handshake(open_codex)

    def wants(self, line: WireLine) -> bool:
        # Requests and answers, and the few notifications _notified reads; not the streamed text.
        obj = line.object
        if obj is None:
            return False
        method = obj.get("method")
        return "id" in obj or (type(method) is str and method in _NOTICED)

    async def on_line(self, line: WireLine) -> None:
        obj = line.object
        if obj is not None and "id" not in obj:
            method = obj.get("method")
            if method == "item/started" or method == "item/completed":
                # A notification (no id), and most of the lines kept in a turn with tools: recorded
                # here, as _notified would, without the JSON-RPC peer's classification and dispatch.
                self._item_seen(method, obj.get("params"))
                return
        await self.conn.on_line(line)

    def on_eof(self) -> None:
        self.conn.close()

    async def send_message(self, text: str) -> None:
        # A turn runs to its end; a message sent meanwhile becomes the next turn on the same thread.
        if self.turn_active or self.thread_id is None:
            self.queued.append(text)
            self.set_idle(False)
        else:
            await self._start_turn(text)

    def unsent(self) -> list[str]:
        return list(self.queued)

    async def interrupt(self) -> None:
        self.queued.clear()
        if self.turn_active and self.thread_id and self.turn_id:
            params = {"threadId": self.thread_id, "turnId": self.turn_id}
            await self.conn.call("turn/interrupt", params, _HANDSHAKE_TIMEOUT)

    async def _notified(self, method: str, params: Any) -> None:
        # Runs on the read loop: it must not await the agent's answers, so new turns go to background.
        p = params if isinstance(params, dict) else {}
        if method == "turn/started":
            self.turn_id = str(_dict(p.get("turn")).get("id") or self.turn_id)
        elif method == "item/started" or method == "item/completed":
            self._item_seen(method, p)
        elif method == "serverRequest/resolved":
            self._withdraw(lambda rid: str(rid) == str(p.get("requestId")))
        elif method == "turn/completed":
            # An approval still open belongs to a turn that is over (interrupted): nobody waits for it.
            self._withdraw(lambda rid: True)
            self.turn_active = False
            if self.queued:
                text = self.queued.pop(0)
                self.turn_active = True
                self.background(lambda: self._start_turn(text), "starting the next turn")
            else:
                self.set_idle(True)

    def _item_seen(self, method: str, params: Any) -> None:
        # Only what an approval reads of its item (approval_request, _approve): a command or file
        # changes, from its start to its end.  Messages and reasoning, most of a turn's items, are
        # not kept.
        item = _dict(_dict(params).get("item"))
        items = self._items
        if method == "item/completed":
            items.pop(str(item.get("id")), None)
        elif "command" in item or "changes" in item:
            items[str(item.get("id"))] = item
            if len(items) > MAX_OPEN_ITEMS:
                del items[next(iter(items))]

    # --- approvals ----------------------------------------------------------------------------

    async def _approve(self, incoming: IncomingRequest) -> dict[str, Any]:
        p = incoming.params if isinstance(incoming.params, dict) else {}
        item = self._items.get(str(p.get("itemId")), {})
        if isinstance(item.get("changes"), list) and "changes" not in p:
            p = {**p, "changes": item["changes"]}  # so a person sees the diff they approve
        request_id = str(incoming.id)
        request = self.executor.approval_request(
            request_id, incoming.method, p, item, self.ctx.task, self.ctx.session_id()
        )
        decision = await decide(self.ctx.approvals, request, self.ctx.task.approval_timeout)
        self.note_decision(request_id, decision)
        return {"decision": codex_decision(decision)}

    def _withdraw(self, which: Callable[[Any], bool]) -> None:
        """Take back open approval questions the server no longer waits for: ``serverRequest/resolved``
        before our answer means Codex settled the request itself (protocols/codex.md §4 sends it
        after our answer, when nothing is open any more).  No answer is sent for them."""
        for method in _APPROVALS:
            for request_id in self.conn.serving(method):
                if which(request_id) and self.conn.withdraw(request_id):
                    self.ctx.note(ApprovalWithdrawn(str(request_id)))


def codex_decision(decision: ApprovalDecision) -> str:
    """accept / acceptForSession / decline / cancel (cancel also ends the turn as interrupted)."""
    if decision.status == "approved":
        return "acceptForSession" if decision.for_session else "accept"
    if decision.status == "timed_out" or decision.interrupt:
        return "cancel"
    return "decline"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
