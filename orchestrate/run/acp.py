"""The Agent Client Protocol client: session set-up, prompts, cancel, and the agent's permission
and elicitation requests (its file and terminal requests are :mod:`.acp_tools`', the session
decisions :mod:`.acp_session`'s)."""

from __future__ import annotations

import contextlib
import signal
from typing import Any

import anyio

from ..approvals.base import ApprovalDecision, ApprovalRequest, decide
from ..approvals.tools import is_read_only_tool
from ..errors import OrchestrateError
from ..executors.acp import AcpExecutor
from ..executors.base import Capabilities
from ..peers.acp_opening import open_acp
from ..peers.jsonrpc import INVALID_PARAMS, IncomingRequest, JsonRpcPeer
from ..wire.lines import WireLine
from ..wire.notes import ApprovalWithdrawn, RunError, Stopped
from . import acp_elicitation
from .acp_session import model_request, offers, reopen_method
from .acp_tools import AcpTools
from .driver import Driver, DriverContext
from .jsonrpc import JsonRpcConnection, JsonRpcError, RpcError, is_handshake

__all__ = ["AcpDriver"]

REQUEST_CANCELLED = -32800  # the answer to a request the agent withdrew ($/cancel_request)
CANCELLED: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}
_PERMISSION = "session/request_permission"
_ELICITATION = "elicitation/create"
_UPDATE = "session/update"
_WITHDRAWN = {_PERMISSION: CANCELLED, _ELICITATION: acp_elicitation.CANCEL}
_STARTUP_TIMEOUT = 90.0  # Gemini and Qwen take 1.5-2 s to answer initialize on an idle machine
_CALL_TIMEOUT = 60.0
_CLOSE_TIMEOUT = 5.0  # session/close at the end: an agent that does not answer is stopped anyway
_EXIT_GRACE = 1.0  # how long an agent that never exits on end of input gets before SIGTERM


class AcpDriver(Driver[AcpExecutor]):
    def __init__(self, ctx: DriverContext[AcpExecutor]) -> None:
        super().__init__(ctx)
        self.executor = ctx.executor
        # Files and terminals the agent asks for: confined, judged, and stopped with the session.
        self.tools = AcpTools(self, self.executor, lambda: self.session_id)
        self.workspace = self.tools.workspace
        handlers = {_PERMISSION: self._permission, _ELICITATION: self._elicitation, **self.tools.handlers()}
        self.conn = JsonRpcConnection(
            JsonRpcPeer(), ctx.process, ctx.task_group, handlers=handlers, on_notification=self._notified
        )
        self._activity = anyio.Event()
        self._settling = False  # waiting for a loaded session's replayed updates to stop
        self._stopped = anyio.Event()
        self.session_id: str | None = None
        self.agent_capabilities: dict[str, Any] = {}
        self.turn_active = False
        self.queued: list[str] = []
        self._turn_cancelled = False

    # --- conversation -------------------------------------------------------------------------

    async def start(self, prompt: str) -> None:
        # initialize (peers/acp_opening.py: the early start's code too), answered before anything
        # else is sent.
        init = await self.conn.handshake(open_acp, _STARTUP_TIMEOUT)
        self._learn(init if isinstance(init, dict) else {})
        opened = await self._open_session()
        await self._choose_model(opened)
        mode = self.executor.options.permission_mode
        if mode:
            await self.conn.call(
                "session/set_mode", {"sessionId": self.session_id, "modeId": mode}, _CALL_TIMEOUT
            )
        self._prompt(prompt)

    @classmethod
    def takes_opening(cls, opening: object) -> bool:
        return is_handshake(opening, open_acp)

    def take_opening(self, opening: object) -> None:
        if not self.takes_opening(opening):
            super().take_opening(opening)
        self.conn.take_handshake(open_acp)

    def _learn(self, init: dict[str, Any]) -> None:
        """What this agent can do, from its own answer (the generic executor declares little)."""
        self.agent_capabilities = init.get("agentCapabilities") or {}
        self.auth_methods = [m for m in init.get("authMethods") or [] if isinstance(m, dict)]
        caps = self.agent_capabilities
        sessions = caps.get("sessionCapabilities") or {}
        self.capabilities = Capabilities(
            protocol="acp",
            session_resume=bool(caps.get("loadSession") or "resume" in sessions),
            fork="fork" in sessions,
            approvals=True,
            mcp=True,  # every ACP agent takes stdio MCP servers; http and sse are optional
            mid_execution_messages=True,
            interrupt=True,
            requires_setup=bool(self.auth_methods),
        )

    async def _open_session(self) -> dict[str, Any]:
        task = self.ctx.task
        params: dict[str, Any] = {
            "cwd": str(self.workspace.root),
            "mcpServers": self.executor.mcp_servers(),
        }
        if self.executor.authenticate_first and self._authenticate_once():
            await self._authenticate()
        if task.resume:
            method = reopen_method(self.agent_capabilities)
            params["sessionId"] = task.resume
        else:
            method = "session/new"
        try:
            result = await self.conn.call(method, params, _CALL_TIMEOUT)
        except JsonRpcError:
            if method != "session/new" or not self._authenticate_once():
                raise
            await self._authenticate()
            result = await self.conn.call(method, params, _CALL_TIMEOUT)
        opened = result if isinstance(result, dict) else {}
        self.session_id = str(opened.get("sessionId") or task.resume)
        if method == "session/load":
            await self._replay_settled()
        return opened

    async def _choose_model(self, opened: dict[str, Any]) -> None:
        """The task's model, for an agent that takes it in the session rather than by a flag."""
        model = self.ctx.task.model or self.executor.options.model
        if not model or self.executor.model_flag or self.session_id is None:
            return
        request = model_request(opened, self.session_id, model)
        if request is None:
            message = f"{self.executor.name} offers no way to choose the model; {model!r} was not set"
            self.ctx.note(RunError("setup_required", message))
            return
        await self.conn.call(*request, _CALL_TIMEOUT)

    async def _notified(self, method: str, params: Any) -> None:
        self._activity.set()
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if method == "$/cancel_request" and isinstance(request_id, int | str):
            self._cancel_request(request_id)

    async def _replay_settled(self, quiet: float = 0.3, limit: float = 5.0) -> None:
        """A loaded session's history is replayed as updates that may go on after the load's answer
        (Gemini 0.61.0); a prompt sent meanwhile would interleave with it.  Wait for a quiet spell."""
        self._settling = True
        try:
            with anyio.move_on_after(limit):
                while True:
                    self._activity = anyio.Event()
                    with anyio.move_on_after(quiet) as spell:
                        await self._activity.wait()
                    if spell.cancelled_caught:
                        return
        finally:
            self._settling = False

    def _authenticate_once(self) -> bool:
        env = self.executor.run_env(self.ctx.task)
        self._auth_method = self.executor.auth_method(self.auth_methods, env)
        return self._auth_method is not None

    async def _authenticate(self) -> None:
        await self.conn.call("authenticate", {"methodId": self._auth_method}, _CALL_TIMEOUT)

    def _prompt(self, text: str) -> None:
        self.turn_active = True
        self._turn_cancelled = False
        self.tools.new_turn()
        self.set_idle(False)
        params = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]}

        async def turn() -> None:
            try:
                # A turn lasts as long as the agent works; the run's own timeout bounds it.
                await self.conn.call("session/prompt", params, None)
            except JsonRpcError:
                pass  # the failed prompt is in the entries; the run goes on to the next turn or ends
            finally:
                self._turn_over()

        self.background(turn, "the prompt")

    def _turn_over(self) -> None:
        self.turn_active = False
        # A permission still open belongs to a turn that is over: Qwen ends a cancelled turn without
        # waiting for our answer (protocols/acp-gemini-qwen.md §4), and nobody waits for it.
        self._withdraw_permissions()
        if self.queued:
            self._prompt(self.queued.pop(0))
        else:
            self.set_idle(True)

    def wants(self, line: WireLine) -> bool:
        # Requests, answers and the notifications _notified reads; the streamed updates (nearly
        # every line of a turn) only while a loaded session's replay is being waited out.
        obj = line.object
        if obj is None:
            return False  # a line that is no JSON object is the normalizer's to show
        return "id" in obj or self._settling or obj.get("method") != _UPDATE

    async def on_line(self, line: WireLine) -> None:
        await self.conn.on_line(line)

    def on_eof(self) -> None:
        self.conn.close()
        self.tools.close()
        self._stopped.set()

    async def send_message(self, text: str) -> None:
        if self.turn_active or self.session_id is None:
            self.queued.append(text)  # the next turn, when this one ends
            self.set_idle(False)
        else:
            self._prompt(text)

    def unsent(self) -> list[str]:
        return list(self.queued)

    async def interrupt(self) -> None:
        self.queued.clear()
        # Pending permission requests are answered "cancelled", as the protocol asks; so is one that
        # arrived but whose handler has not started yet.
        self._turn_cancelled = True
        self._withdraw_permissions()
        if self.turn_active and self.session_id:
            await self.conn.notify("session/cancel", {"sessionId": self.session_id})

    async def set_permission_mode(self, mode: str) -> None:
        await self.conn.call(
            "session/set_mode", {"sessionId": self.session_id, "modeId": mode}, _CALL_TIMEOUT
        )

    async def end_input(self) -> None:
        """Close the session where the agent offers it, then its input.  An agent that stays alive
        after that (``exits_at_end_of_input`` False: the Zed adapters) is sent SIGTERM after a
        moment: its work is done, so that is how it ends, not a failure."""
        self.tools.close()
        if self.session_id is not None and offers(self.agent_capabilities, "close") and not self.input_closed:
            # (its answer, or its silence, is in the raw log; the process ends regardless)
            with contextlib.suppress(OrchestrateError):
                await self.conn.call("session/close", {"sessionId": self.session_id}, _CLOSE_TIMEOUT)
        await super().end_input()
        if not self.executor.exits_at_end_of_input:
            self.ctx.task_group.start_soon(self._stop_lingering)

    async def _stop_lingering(self) -> None:
        with anyio.move_on_after(_EXIT_GRACE):
            await self._stopped.wait()
        if self._stopped.is_set() or self.ctx.process.returncode is not None:
            return
        self.ended_by_client = True
        reason = f"{self.executor.name} stays alive when its input closes; stopped with SIGTERM"
        self.ctx.note(Stopped(reason))
        self.ctx.process.send_signal(signal.SIGTERM)

    # --- permissions --------------------------------------------------------------------------

    async def _permission(self, incoming: IncomingRequest) -> dict[str, Any]:
        from .acp_params import RequestPermissionRequest  # built at the first request, not at the start

        params = _params(RequestPermissionRequest, incoming)
        call = params.tool_call
        request = self._approval_request(str(incoming.id), call)
        if self._turn_cancelled:
            return CANCELLED
        decision = await decide(self.ctx.approvals, request, self.ctx.task.approval_timeout)
        self.note_decision(str(incoming.id), decision)
        self.tools.grant_writes(call, decision)
        option = _choose(params.options, decision)
        if decision.status != "approved" and decision.interrupt:
            self.background(self.interrupt, "cancelling the turn")
        if option is None:
            return CANCELLED
        return {"outcome": {"outcome": "selected", "optionId": option}}

    def _withdraw_permissions(self) -> None:
        """Take back every open permission question (and question to the person); each is answered
        ``cancelled``, as the protocol asks of a client whose turn was cancelled."""
        for method, answer in _WITHDRAWN.items():
            for request_id in self.conn.serving(method):
                if self.conn.withdraw(request_id, answer):
                    self.ctx.note(ApprovalWithdrawn(str(request_id)))

    async def _elicitation(self, incoming: IncomingRequest) -> dict[str, Any]:
        """The agent asks the person for input: through the approval service, never left hanging."""
        if self._turn_cancelled:
            return acp_elicitation.CANCEL
        request = acp_elicitation.request_for(
            str(incoming.id),
            incoming.params,
            executor=self.executor.name,
            session_id=self.session_id,
            cwd=str(self.ctx.task.cwd),
        )
        decision = await decide(self.ctx.approvals, request, self.ctx.task.approval_timeout)
        self.note_decision(str(incoming.id), decision, question="elicitation")
        return acp_elicitation.answer(incoming.params, decision)

    def _cancel_request(self, request_id: int | str) -> None:
        """``$/cancel_request``: the agent takes a request of its own back.  The answer the protocol
        asks for then is a result that says so (a permission: ``cancelled``) or the error -32800."""
        method = self.conn.method_of(request_id)
        if method in _WITHDRAWN:
            if self.conn.withdraw(request_id, _WITHDRAWN[method]):
                self.ctx.note(ApprovalWithdrawn(str(request_id)))
        elif method is not None:
            self.conn.withdraw(request_id, RpcError(REQUEST_CANCELLED, "Request cancelled"))

    def _approval_request(self, request_id: str, call: Any) -> ApprovalRequest:
        raw = call.raw_input if isinstance(call.raw_input, dict) else {}
        kind = call.kind or ""
        paths = [loc.path for loc in call.locations or []]
        paths += [c.path for c in call.content or [] if getattr(c, "type", None) == "diff"]
        for key in ("file_path", "absolute_path", "path"):
            if isinstance(raw.get(key), str) and raw[key] not in paths:
                paths.append(raw[key])
        command = (
            raw.get("command")
            if isinstance(raw.get("command"), str)
            else (call.title if kind == "execute" else None)
        )
        meta = call.field_meta or {}
        name = str(
            meta.get("toolName")
            or (
                call.tool_call_id.split("__")[0]
                if "__" in call.tool_call_id
                else call.title or kind or "tool"
            )
        )
        return ApprovalRequest(
            request_id=request_id,
            tool_name=name,
            tool_input=raw or call.model_dump(by_alias=True, exclude_none=True),
            tool_call_id=call.tool_call_id,
            context=call.title,
            command=command,
            paths=tuple(paths),
            read_only=is_read_only_tool(name),  # our table: the agent's "kind" is its own label
            executor=self.executor.name,
            session_id=self.session_id,
            cwd=str(self.ctx.task.cwd),
        )


def _params(model: Any, incoming: IncomingRequest) -> Any:
    try:
        return model.model_validate(incoming.params or {})
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, f"invalid params for {incoming.method}: {exc}") from exc


def _choose(options: list[Any], decision: ApprovalDecision) -> str | None:
    """The agent's option that says what the approval service decided."""
    by_kind: dict[str, str] = {}
    for option in options:
        by_kind.setdefault(str(getattr(option.kind, "value", option.kind)), option.option_id)
    if decision.status == "approved":
        wanted = ["allow_always", "allow_once"] if decision.for_session else ["allow_once", "allow_always"]
    else:
        wanted = ["reject_once", "reject_always"]
    return next((by_kind[k] for k in wanted if k in by_kind), None)
