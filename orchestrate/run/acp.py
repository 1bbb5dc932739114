"""The Agent Client Protocol client: session set-up, prompts, cancel, and the requests the agent makes
of us (permissions, files confined to the workspace, terminals)."""

from __future__ import annotations

import shlex
from typing import Any

import anyio
from acp import schema

from ..approvals.base import ApprovalDecision, ApprovalRequest, decide, write_refusal
from ..errors import OrchestrateError
from ..executors.acp import AcpExecutor
from ..executors.base import Capabilities
from ..peers.jsonrpc import INVALID_PARAMS, IncomingRequest, JsonRpcPeer
from ..process.terminal import ManagedCommand
from .driver import Driver, DriverContext
from .jsonrpc import JsonRpcConnection, JsonRpcError, RpcError
from .workspace import OutsideWorkspaceError, Workspace

__all__ = ["AcpDriver"]

PROTOCOL_VERSION = 1
RESOURCE_NOT_FOUND = -32002
_STARTUP_TIMEOUT = 90.0  # Gemini and Qwen take 1.5-2 s to answer initialize on an idle machine
_CALL_TIMEOUT = 60.0
_READ_ONLY_KINDS = {"read", "search", "fetch", "think"}
TERMINAL_OUTPUT_BYTES = 1 << 20
"""The output a terminal keeps (its tail) when the agent sets no ``outputByteLimit``."""


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)  # type: ignore[no-any-return]


class AcpDriver(Driver):
    def __init__(self, ctx: DriverContext) -> None:
        super().__init__(ctx)
        assert isinstance(ctx.executor, AcpExecutor)
        self.executor = ctx.executor
        self.workspace = Workspace(ctx.task.cwd)
        handlers = {
            "session/request_permission": self._permission,
            "fs/read_text_file": self._read_file,
            "fs/write_text_file": self._write_file,
            "terminal/create": self._terminal_create,
            "terminal/output": self._terminal_output,
            "terminal/wait_for_exit": self._terminal_wait,
            "terminal/kill": self._terminal_kill,
            "terminal/release": self._terminal_release,
        }
        self.conn = JsonRpcConnection(
            JsonRpcPeer(), ctx.process, ctx.task_group, handlers=handlers, on_notification=self._notified
        )
        self._activity = anyio.Event()
        self.session_id: str | None = None
        self.agent_capabilities: dict[str, Any] = {}
        self.turn_active = False
        self.queued: list[str] = []
        self._pending_permissions: set[anyio.CancelScope] = set()
        self._turn_cancelled = False
        self._terminals: dict[str, ManagedCommand] = {}

    # --- conversation -------------------------------------------------------------------------

    async def start(self, prompt: str) -> None:
        request = schema.InitializeRequest(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=schema.ClientCapabilities(
                fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
            ),
            client_info=schema.Implementation(name="orchestrate", title="orchestrate", version="0.1.0"),
        )
        init = await self.conn.call("initialize", _dump(request), _STARTUP_TIMEOUT)
        self._learn(init if isinstance(init, dict) else {})
        await self._open_session()
        mode = self.executor.options.permission_mode
        if mode:
            await self.conn.call(
                "session/set_mode", {"sessionId": self.session_id, "modeId": mode}, _CALL_TIMEOUT
            )
        self._prompt(prompt)

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

    async def _open_session(self) -> None:
        task = self.ctx.task
        params: dict[str, Any] = {
            "cwd": str(self.workspace.root),
            "mcpServers": self.executor.mcp_servers(),
        }
        if task.resume:
            method = "session/load" if self.agent_capabilities.get("loadSession") else "session/resume"
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
        self.session_id = str((result or {}).get("sessionId") or task.resume)
        if method == "session/load":
            await self._replay_settled()

    async def _notified(self, method: str, params: Any) -> None:
        self._activity.set()

    async def _replay_settled(self, quiet: float = 0.3, limit: float = 5.0) -> None:
        """A loaded session's history is replayed as updates that may go on after the load's answer
        (Gemini 0.61.0); a prompt sent meanwhile would interleave with it.  Wait for a quiet spell."""
        with anyio.move_on_after(limit):
            while True:
                self._activity = anyio.Event()
                with anyio.move_on_after(quiet) as spell:
                    await self._activity.wait()
                if spell.cancelled_caught:
                    return

    def _authenticate_once(self) -> bool:
        env = self.executor.run_env(self.ctx.task)
        self._auth_method = self.executor.auth_method(self.auth_methods, env)
        return self._auth_method is not None

    async def _authenticate(self) -> None:
        await self.conn.call("authenticate", {"methodId": self._auth_method}, _CALL_TIMEOUT)

    def _prompt(self, text: str) -> None:
        self.turn_active = True
        self._turn_cancelled = False
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
        if self.queued:
            self._prompt(self.queued.pop(0))
        else:
            self.set_idle(True)

    async def on_line(self, line: str) -> None:
        await self.conn.on_line(line)

    def on_eof(self) -> None:
        self.conn.close()
        for command in self._terminals.values():
            command.kill()

    async def send_message(self, text: str) -> None:
        if self.turn_active or self.session_id is None:
            self.queued.append(text)  # the next turn, when this one ends
            self.set_idle(False)
        else:
            self._prompt(text)

    async def interrupt(self) -> None:
        self.queued.clear()
        # Pending permission requests are answered "cancelled", as the protocol asks; so is one that
        # arrived but whose handler has not started yet.
        self._turn_cancelled = True
        for scope in list(self._pending_permissions):
            scope.cancel()
        if self.turn_active and self.session_id:
            await self.conn.notify("session/cancel", {"sessionId": self.session_id})

    async def set_permission_mode(self, mode: str) -> None:
        await self.conn.call(
            "session/set_mode", {"sessionId": self.session_id, "modeId": mode}, _CALL_TIMEOUT
        )

    async def end_input(self) -> None:
        for command in self._terminals.values():
            command.kill()
        await super().end_input()

    # --- permissions --------------------------------------------------------------------------

    async def _permission(self, incoming: IncomingRequest) -> dict[str, Any]:
        params = _params(schema.RequestPermissionRequest, incoming)
        call = params.tool_call
        request = self._approval_request(str(incoming.id), call)
        decision: ApprovalDecision | None = None
        if self._turn_cancelled:
            return {"outcome": {"outcome": "cancelled"}}
        with anyio.CancelScope() as scope:
            self._pending_permissions.add(scope)
            try:
                decision = await decide(self.ctx.approvals, request, self.ctx.task.approval_timeout)
            finally:
                self._pending_permissions.discard(scope)
        if decision is None:  # the turn was cancelled while we were asking
            return {"outcome": {"outcome": "cancelled"}}
        self.note_decision(str(incoming.id), decision)
        option = _choose(params.options, decision)
        if decision.status != "approved" and decision.interrupt:
            self.background(self.interrupt, "cancelling the turn")
        if option is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": option}}

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
            read_only=kind in _READ_ONLY_KINDS,
            executor=self.executor.name,
            session_id=self.session_id,
            cwd=str(self.ctx.task.cwd),
        )

    # --- files --------------------------------------------------------------------------------

    async def _read_file(self, incoming: IncomingRequest) -> dict[str, Any]:
        params = _params(schema.ReadTextFileRequest, incoming)
        try:
            content = self.workspace.read_text(params.path, params.line, params.limit)
        except OutsideWorkspaceError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from exc
        except FileNotFoundError as exc:
            if self.executor.missing_file_reads_empty:
                return {"content": ""}
            raise RpcError(RESOURCE_NOT_FOUND, f"Resource not found: {params.path}") from exc
        except OSError as exc:
            raise RpcError(INVALID_PARAMS, f"cannot read {params.path}: {exc.strerror or exc}") from exc
        return {"content": content}

    async def _write_file(self, incoming: IncomingRequest) -> None:
        params = _params(schema.WriteTextFileRequest, incoming)
        try:
            real = self.workspace.resolve(params.path)
        except OutsideWorkspaceError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from exc
        refusal = write_refusal(self.ctx.approvals, str(real), str(self.workspace.root))
        if refusal is not None:
            raise RpcError(INVALID_PARAMS, f"writing {params.path} was refused: {refusal}")
        try:
            self.workspace.write_text(params.path, params.content)
        except OutsideWorkspaceError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from exc
        except OSError as exc:
            raise RpcError(INVALID_PARAMS, f"cannot write {params.path}: {exc.strerror or exc}") from exc
        return None

    # --- terminals ----------------------------------------------------------------------------

    async def _terminal_create(self, incoming: IncomingRequest) -> dict[str, Any]:
        params = _params(schema.CreateTerminalRequest, incoming)
        argv = [params.command, *(params.args or [])]
        command_text = shlex.join(argv) if params.args else params.command
        try:
            cwd = self.workspace.resolve(params.cwd) if params.cwd else self.workspace.root
        except OutsideWorkspaceError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from exc
        request = ApprovalRequest(
            request_id=f"terminal:{incoming.id}",
            tool_name="terminal",
            tool_input=_dump(params),
            command=command_text,
            executor=self.executor.name,
            session_id=self.session_id,
            cwd=str(cwd),
        )
        decision = await decide(self.ctx.approvals, request, self.ctx.task.approval_timeout)
        self.note_decision(request.request_id, decision, command=command_text)
        if decision.status != "approved":
            raise RpcError(
                INVALID_PARAMS, f"running {command_text!r} was refused: {decision.reason or 'denied'}"
            )
        env = {**self.ctx.process.spec.env, **{v.name: v.value for v in params.env or []}}
        # Plain argv when args are given; a shell when the command comes as one string, as agents send it.
        spawn = argv if params.args else ["/bin/sh", "-c", params.command]
        try:
            limit = params.output_byte_limit
            command = await ManagedCommand.start(
                self.ctx.task_group, spawn, cwd, env, TERMINAL_OUTPUT_BYTES if limit is None else limit
            )
        except OrchestrateError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from exc
        terminal_id = f"term_{len(self._terminals) + 1}"
        self._terminals[terminal_id] = command
        return {"terminalId": terminal_id}

    def _terminal(self, incoming: IncomingRequest) -> ManagedCommand:
        terminal_id = str((incoming.params or {}).get("terminalId"))
        command = self._terminals.get(terminal_id)
        if command is None:
            raise RpcError(INVALID_PARAMS, f"no terminal {terminal_id!r}")
        return command

    async def _terminal_output(self, incoming: IncomingRequest) -> dict[str, Any]:
        command = self._terminal(incoming)
        out: dict[str, Any] = {"output": command.output, "truncated": command.truncated}
        status = command.exit_status
        if status is not None:
            out["exitStatus"] = {"exitCode": status[0], "signal": status[1]}
        return out

    async def _terminal_wait(self, incoming: IncomingRequest) -> dict[str, Any]:
        code, sig = await self._terminal(incoming).wait()
        return {"exitCode": code, "signal": sig}

    async def _terminal_kill(self, incoming: IncomingRequest) -> dict[str, Any]:
        self._terminal(incoming).kill()
        return {}

    async def _terminal_release(self, incoming: IncomingRequest) -> dict[str, Any]:
        command = self._terminal(incoming)
        command.kill()
        self._terminals.pop(str((incoming.params or {}).get("terminalId")), None)
        return {}


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
