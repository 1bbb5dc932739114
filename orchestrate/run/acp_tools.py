"""What an ACP agent may ask the client to do for it: read and write files in the workspace, run
commands in terminals.  Each goes through the same approvals as the agent's own tool calls, with
everything that changes what happens shown to whoever judges it.

A write is judged as the write it is (``fs/write_text_file``, its real path, a diff), unless the
person already approved that very change this turn through ``session/request_permission`` (Gemini
asks for its edit tool, then writes): such a grant is for one path (and content, when the agent
showed a diff), used once.  A write under ``.git/`` is always asked, grant or not: hooks and config
there run code.  A command is judged with every environment variable that could change what runs
written in front of it, and its working directory must be inside the workspace.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..approvals.base import ApprovalDecision, ApprovalRequest, decide, read_refusal, write_refusal
from ..errors import OrchestrateError
from ..executors.acp import AcpExecutor
from ..peers.jsonrpc import INVALID_PARAMS, IncomingRequest
from .driver import Driver
from .jsonrpc import RpcError
from .terminals import Terminal, Terminals, checked_env, judged_command
from .workspace import OutsideWorkspaceError, Workspace

__all__ = ["AcpTools"]

RESOURCE_NOT_FOUND = -32002
_GRANTS = 256  # write grants kept per turn
_DIFF_INPUT = 64 * 1024  # larger files are shown as their new content, not diffed
_SHOWN = 8 * 1024  # characters of a diff or content put in front of the person
_WRITE_KINDS = {"edit", "delete", "move"}
# A command string runs in bash, the grammar the policy judged it with.  /bin/sh may be dash, which
# reads the same text differently ($'a\'; rm -rf x; #' is one echo word to bash, three commands to
# dash).  Only where there is no bash at all does it fall back to sh.
_SHELL = next((s for s in ("/bin/bash", "/usr/bin/bash") if os.access(s, os.X_OK)), None) or (
    shutil.which("bash") or "/bin/sh"
)


class AcpTools:
    def __init__(
        self, driver: Driver[AcpExecutor], executor: AcpExecutor, session_id: Callable[[], str | None]
    ) -> None:
        self.driver = driver
        self.ctx = driver.ctx
        self.executor = executor
        self.session_id = session_id
        self.workspace = Workspace(self.ctx.task.cwd)
        self.terminals = Terminals()
        self._grants: list[tuple[str, str | None]] = []

    def handlers(self) -> dict[str, Callable[[IncomingRequest], Any]]:
        return {
            "fs/read_text_file": self.read_file,
            "fs/write_text_file": self.write_file,
            "terminal/create": self.terminal_create,
            "terminal/output": self.terminal_output,
            "terminal/wait_for_exit": self.terminal_wait,
            "terminal/kill": self.terminal_kill,
            "terminal/release": self.terminal_release,
        }

    def close(self) -> None:
        """The session is over: every terminal command, and what it started, is stopped."""
        self.terminals.close()

    # --- grants from session/request_permission -----------------------------------------------

    def new_turn(self) -> None:
        self._grants.clear()

    def grant_writes(self, call: Any, decision: ApprovalDecision) -> None:
        """Remember the writes a permission the person approved was about (its diffs, or its paths
        for an edit), so the ``fs/write_text_file`` that carries it out is not asked again."""
        if decision.status != "approved":
            return
        shown: set[str] = set()
        for content in call.content or []:
            if getattr(content, "type", None) == "diff":
                self._grant(content.path, _digest(content.new_text))
                shown.add(self._real(content.path) or "")
        if (call.kind or "") in _WRITE_KINDS:
            for location in call.locations or []:
                # Any content only for a file whose new content was not shown: where a diff was,
                # the person approved that content, not whatever the write then carries.
                if self._real(location.path) not in shown:
                    self._grant(location.path, None)

    def _real(self, path: str) -> str | None:
        try:
            return str(self.workspace.resolve(path))
        except OutsideWorkspaceError:
            return None

    def _grant(self, path: str, digest: str | None) -> None:
        real = self._real(path)
        if real is not None and len(self._grants) < _GRANTS:
            self._grants.append((real, digest))

    def _use_grant(self, real: Path, content: str) -> bool:
        for key in ((str(real), _digest(content)), (str(real), None)):
            if key in self._grants:
                self._grants.remove(key)
                return True
        return False

    # --- files --------------------------------------------------------------------------------

    async def read_file(self, incoming: IncomingRequest) -> dict[str, Any]:
        from .acp_params import ReadTextFileRequest  # built at the first request (acp_params.py)

        params = _params(ReadTextFileRequest, incoming)
        root = str(self.workspace.root)
        # Deny path rules, on the path as named and on the file really opened.
        refusal = read_refusal(self.ctx.approvals, params.path, root)
        if refusal is not None:
            raise RpcError(INVALID_PARAMS, f"reading {params.path} was refused: {refusal}")

        def judge(real: str) -> str | None:
            return read_refusal(self.ctx.approvals, real, root)

        try:
            content = await self.workspace.read_text(params.path, params.line, params.limit, judge=judge)
        except FileNotFoundError as exc:
            if self.executor.missing_file_reads_empty:
                return {"content": ""}
            raise RpcError(RESOURCE_NOT_FOUND, f"Resource not found: {params.path}") from exc
        except OrchestrateError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from exc
        except OSError as exc:
            raise RpcError(INVALID_PARAMS, f"cannot read {params.path}: {exc.strerror or exc}") from exc
        return {"content": content}

    async def write_file(self, incoming: IncomingRequest) -> None:
        from .acp_params import WriteTextFileRequest  # built at the first request (acp_params.py)

        params = _params(WriteTextFileRequest, incoming)
        try:
            real = self.workspace.resolve(params.path)
        except OutsideWorkspaceError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from exc
        await self._approve_write(str(incoming.id), params.path, real, params.content)
        try:
            # The real path that was judged, no link followed: a directory swapped for a link to
            # .git/hooks while the person was answering cannot carry the write there.
            await self.workspace.write_text(str(real), params.content, exact=True)
        except OrchestrateError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from exc
        except OSError as exc:
            raise RpcError(INVALID_PARAMS, f"cannot write {params.path}: {exc.strerror or exc}") from exc
        return None

    async def _approve_write(self, request_id: str, path: str, real: Path, content: str) -> None:
        root = self.workspace.root
        refusal = write_refusal(self.ctx.approvals, str(real), str(root))  # deny rules, always first
        if refusal is not None:
            raise RpcError(INVALID_PARAMS, f"writing {path} was refused: {refusal}")
        # Compared without case: on a case-insensitive filesystem (macOS) .GIT/hooks is .git/hooks.
        in_git = ".git" in (part.casefold() for part in real.relative_to(root).parts)
        if not in_git and self._use_grant(real, content):
            return
        request = ApprovalRequest(
            request_id=f"fs/write_text_file:{request_id}",
            tool_name="fs/write_text_file",
            tool_input={"path": path, "content": _clip(content)},
            context=await self._write_context(path, real, content),
            paths=(str(real),),
            read_only=False,
            executor=self.executor.name,
            session_id=self.session_id(),
            cwd=str(root),
        )
        decision = await decide(self.ctx.approvals, request, self.ctx.task.approval_timeout)
        self.driver.note_decision(request.request_id, decision, path=str(real))
        if decision.status != "approved":
            if decision.interrupt:
                self.driver.background(self.driver.interrupt, "cancelling the turn")
            raise RpcError(INVALID_PARAMS, f"writing {path} was refused: {decision.reason or 'denied'}")

    async def _write_context(self, path: str, real: Path, content: str) -> str:
        """What the write changes, for the person: a diff, or the new content when there is no
        readable old file small enough to diff."""
        shown = str(real.relative_to(self.workspace.root))
        verb = "replaces"
        try:
            old: str | None = await self.workspace.read_text(path, max_bytes=_DIFF_INPUT)
        except FileNotFoundError:
            old, verb = None, "creates"
        except (OrchestrateError, OSError):
            old = None  # too large to diff, or not readable (a hard link): the new content only
        if old is None or len(content) > _DIFF_INPUT:
            return f"{verb} {shown}:\n{_clip(content)}"
        diff = difflib.unified_diff(
            old.splitlines(keepends=True), content.splitlines(keepends=True), f"a/{shown}", f"b/{shown}"
        )
        return _clip("".join(diff)) or f"rewrites {shown} unchanged"

    # --- terminals ----------------------------------------------------------------------------

    async def terminal_create(self, incoming: IncomingRequest) -> dict[str, Any]:
        from .acp_params import CreateTerminalRequest  # built at the first request (acp_params.py)

        params = _params(CreateTerminalRequest, incoming)
        try:
            env = checked_env([(v.name, v.value) for v in params.env or []])
            # Held from the check to the spawn: the command starts in the directory the person
            # was shown, even if its name is swapped for a link while they answer.
            async with self.workspace.held_directory(params.cwd or str(self.workspace.root)) as (
                cwd,
                start_in,
            ):
                return await self._create_terminal(incoming, params, env, cwd, start_in)
        except RpcError:
            raise  # the answer already (a refusal, a spawn that failed)
        except (OrchestrateError, ValueError) as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from exc
        except OSError as exc:
            raise RpcError(INVALID_PARAMS, f"cannot run in {params.cwd}: {exc.strerror or exc}") from exc

    async def _create_terminal(
        self, incoming: IncomingRequest, params: Any, env: dict[str, str], cwd: Path, start_in: Path
    ) -> dict[str, Any]:
        command_text = judged_command(params.command, params.args, env)
        request = ApprovalRequest(
            request_id=f"terminal:{incoming.id}",
            tool_name="terminal",
            tool_input=_dump(params),
            command=command_text,
            context=f"in {cwd}",
            executor=self.executor.name,
            session_id=self.session_id(),
            cwd=str(cwd),
        )
        decision = await decide(self.ctx.approvals, request, self.ctx.task.approval_timeout)
        self.driver.note_decision(request.request_id, decision, command=command_text)
        if decision.status != "approved":
            raise RpcError(
                INVALID_PARAMS, f"running {command_text!r} was refused: {decision.reason or 'denied'}"
            )
        # Plain argv when args are given; a shell when the command comes as one string, as agents send it.
        argv = [params.command, *params.args] if params.args else [_SHELL, "-c", params.command]
        try:
            terminal_id = await self.terminals.create(
                self.ctx.task_group,
                argv,
                start_in,
                {**self.ctx.process.spec.env, **env},
                params.output_byte_limit,
            )
        except OrchestrateError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from exc
        return {"terminalId": terminal_id}

    def _terminal(self, incoming: IncomingRequest) -> tuple[str, Terminal]:
        terminal_id = (incoming.params or {}).get("terminalId")
        if isinstance(terminal_id, str) and (terminal := self.terminals.get(terminal_id)) is not None:
            return terminal_id, terminal
        raise RpcError(INVALID_PARAMS, f"no terminal {terminal_id!r}")

    async def terminal_output(self, incoming: IncomingRequest) -> dict[str, Any]:
        _, terminal = self._terminal(incoming)
        out: dict[str, Any] = {"output": terminal.output, "truncated": terminal.truncated}
        status = terminal.exit_status
        if status is not None:
            out["exitStatus"] = {"exitCode": status[0], "signal": status[1]}
        return out

    async def terminal_wait(self, incoming: IncomingRequest) -> dict[str, Any]:
        code, sig = await self._terminal(incoming)[1].wait()
        return {"exitCode": code, "signal": sig}

    async def terminal_kill(self, incoming: IncomingRequest) -> dict[str, Any]:
        self._terminal(incoming)[1].kill()
        return {}

    async def terminal_release(self, incoming: IncomingRequest) -> dict[str, Any]:
        terminal_id, _ = self._terminal(incoming)
        self.terminals.release(terminal_id)
        return {}


def _params(model: Any, incoming: IncomingRequest) -> Any:
    try:
        return model.model_validate(incoming.params or {})
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, f"invalid params for {incoming.method}: {exc}") from exc


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)  # type: ignore[no-any-return]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _clip(text: str) -> str:
    if len(text) <= _SHOWN:
        return text
    return f"{text[:_SHOWN]}\n… ({len(text) - _SHOWN} more characters)"
