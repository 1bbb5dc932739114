"""The Claude Code driver: initialize, user turns, approvals over the control channel, interrupt."""

from __future__ import annotations

import contextlib
import dataclasses

import anyio

from ..approvals.base import ApprovalDecision, changed_input_refusal, decide
from ..errors import ProcessExitedError
from ..executors.claude_code import ClaudeCodeExecutor
from ..peers.claude_control import (
    CanUseTool,
    ClaudeControlPeer,
    ControlAnswered,
    ControlCancelled,
    SessionState,
    TurnEnded,
    UnsupportedRequest,
)
from ..peers.claude_opening import ClaudeOpening, open_claude
from ..wire.lines import WireLine
from ..wire.notes import ApprovalWithdrawn, RunError
from .driver import Driver, DriverContext

__all__ = ["ClaudeDriver"]

_CONTROL_TIMEOUT = 30.0
# The lines the control peer reads (ClaudeControlPeer.receive); the text stream it never needs.
_PEER_LINES = frozenset({"control_request", "control_cancel_request", "control_response", "result", "system"})


class ClaudeDriver(Driver[ClaudeCodeExecutor]):
    def __init__(self, ctx: DriverContext[ClaudeCodeExecutor]) -> None:
        super().__init__(ctx)
        self.peer = ClaudeControlPeer()
        self._turns_sent = 0
        self._turns_done = 0
        self._answers: dict[str, anyio.Event] = {}
        self._asking: dict[str, anyio.CancelScope] = {}  # can_use_tool id -> the question being asked
        self._opened = False  # its first lines were written before the run adopted the process

    async def start(self, prompt: str) -> None:
        if self._opened:  # written before the run adopted the process, by the code below
            self._opened = False
            self._turn_sent()
            return
        # initialize, then the prompt (peers/claude_opening.py: the early start's code too); we
        # do not wait for initialize's answer before the first turn.
        initialize, message = open_claude(prompt, self.peer).lines
        await self._write(initialize)
        self._turn_sent()
        await self.ctx.process.write(message)

    @classmethod
    def takes_opening(cls, opening: object) -> bool:
        return isinstance(opening, ClaudeOpening) and len(opening.lines) == 2

    def take_opening(self, opening: object) -> None:
        if not self.takes_opening(opening):
            super().take_opening(opening)
        assert isinstance(opening, ClaudeOpening)
        self.peer = opening.peer  # the initialize request it sent is one it waits an answer for
        self._opened = True

    async def send_message(self, text: str) -> None:
        self._turn_sent()
        await self.ctx.process.write(self.peer.user_message(text))

    def _turn_sent(self) -> None:
        self._turns_sent += 1
        self.set_idle(False)

    async def interrupt(self) -> None:
        request_id, line = self.peer.request("interrupt")
        answered = self._answers[request_id] = anyio.Event()
        await self._write(line)
        with anyio.move_on_after(_CONTROL_TIMEOUT):
            await answered.wait()

    async def set_permission_mode(self, mode: str) -> None:
        request_id, line = self.peer.request("set_permission_mode", mode=mode)
        answered = self._answers[request_id] = anyio.Event()
        await self.ctx.process.write(line)
        with anyio.move_on_after(_CONTROL_TIMEOUT):
            await answered.wait()

    def wants(self, line: WireLine) -> bool:
        kind = line.object.get("type") if line.object is not None else None
        return type(kind) is str and kind in _PEER_LINES

    async def on_line(self, line: WireLine) -> None:
        for event in self.peer.receive(line):
            match event:
                case CanUseTool():
                    self.ctx.task_group.start_soon(self._approve, event)
                case ControlCancelled(request_id=rid):
                    self._withdrawn(rid)
                case UnsupportedRequest(reply=reply):
                    await self._write(reply)
                case ControlAnswered(request_id=rid) if rid in self._answers:
                    self._answers.pop(rid).set()
                case TurnEnded():
                    self._turns_done += 1
                    if self._turns_done >= self._turns_sent:
                        self.set_idle(True)
                case SessionState(state="idle"):
                    # Covers queued follow-ups the CLI folded into one turn (fewer results than sends).
                    if self._turns_done > 0:
                        self.set_idle(True)
                case _:
                    pass

    async def _approve(self, event: CanUseTool) -> None:
        executor = self.ctx.executor
        try:
            request = executor.approval_request(event, self.ctx.task, self.ctx.session_id())
        except Exception as exc:  # a request we cannot read is refused: the CLI must not wait on it
            reason = f"orchestrate could not read this permission request ({type(exc).__name__}: {exc})"
            self.ctx.note(RunError("protocol_error", reason))
            await self._write(self.peer.deny(event.request_id, reason))
            return
        decision: ApprovalDecision | None = None
        with anyio.CancelScope() as scope:
            self._asking[event.request_id] = scope
            if event.request_id not in self.peer.pending_approvals:
                scope.cancel()  # withdrawn before this task even started
            try:
                decision = await decide(self.ctx.approvals, request, self.ctx.task.approval_timeout)
            finally:
                del self._asking[event.request_id]
        if decision is None or event.request_id not in self.peer.pending_approvals:
            return  # withdrawn: the CLI wants no answer (protocols/claude-code.md §6, as the SDK does)
        if decision.status == "approved" and isinstance(decision.updated_input, dict):
            # A changed input is a new call: the hard deny rules judge it as they judged the first.
            changed = dataclasses.replace(event, input=decision.updated_input)
            refusal = changed_input_refusal(
                self.ctx.approvals, executor.approval_request(changed, self.ctx.task, self.ctx.session_id())
            )
            if refusal is not None:
                decision = ApprovalDecision.deny(refusal)
        self.note_decision(event.request_id, decision)
        await self._write(self._reply(event, decision))

    def _withdrawn(self, request_id: str) -> None:
        """``control_cancel_request``: the CLI gave up on a ``can_use_tool`` (an interrupt while it was
        pending).  The question is taken back from the approval service at once, so a person is not
        left answering it and the next question is not queued behind it."""
        scope = self._asking.get(request_id)
        if scope is not None:
            scope.cancel()
            self.ctx.note(ApprovalWithdrawn(request_id))

    def _reply(self, event: CanUseTool, decision: ApprovalDecision) -> bytes:
        if decision.status == "approved":
            changed = decision.updated_input if isinstance(decision.updated_input, dict) else None
            return self.peer.allow(event.request_id, changed if changed is not None else event.input)
        reason = decision.reason or "denied"
        return self.peer.deny(event.request_id, reason, interrupt=decision.interrupt)

    async def _write(self, data: bytes) -> None:
        # The process may be gone already (crash, shutdown); the run reports that from its exit.
        with contextlib.suppress(ProcessExitedError):
            await self.ctx.process.write(data)
