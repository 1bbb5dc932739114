"""How far an ACP tool call has got, and what a command it ran printed (helpers of acp.py).

Status.  A call moves created, pending approval, running, done, never back, whatever the agent
reports: OpenCode 1.18 says ``in_progress`` before it asks permission for the call (nothing runs
until the answer), and Droid 0.225 announces an interrupted call again (``tool_call``, status
``pending``) after reporting it failed.  So an ``in_progress`` with nothing to show yet (no output,
no terminal) leaves the call where it is until the question is answered or output or its end
comes, and a call that is done stays done.

Output.  Agents give a command's output in different places: in the update's content (Qwen,
OpenCode), in ``rawOutput`` alone (codex-acp 0.16: ``stdout``, ``stderr``, ``exit_code``; OpenCode:
``output`` and ``metadata.exit``; Qwen: ``output``, ``exitCode``), or not at all because the
command ran in one of our terminals (Droid 0.225: ``terminal/create``, then content
``{"type": "terminal", "terminalId"}`` on the call; the output is what our client answered to
``terminal/output``, the exit code what it answered to ``terminal/wait_for_exit``, both in the raw
log as our stdin).  All of it lands on the call as the command's result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..entries import NO_EXIT_CODE, CommandResult, ToolStatus
from .values import obj, text

__all__ = ["Terminals", "advance", "command_result", "shows_progress"]

_RANK: dict[str, int] = {"created": 0, "pending_approval": 1, "running": 2}
_BEFORE_RUNNING = frozenset({"terminal"})  # content that shows a pending call doing something
_RUNNING = frozenset({"terminal", "content"})  # ... any other
_MAX_TRACKED = 1024  # terminals and unanswered terminal requests remembered (oldest dropped first)


def shows_progress(call: dict[str, Any]) -> bool:
    """Whether an update shows the call doing something: output, or a terminal it runs in (a
    proposed diff or a question's text is not that: they come before the permission)."""
    raw = call.get("rawOutput")
    if (isinstance(raw, dict) and raw) or (isinstance(raw, str) and raw):
        return True
    shown = _BEFORE_RUNNING if call.get("status") == "pending" else _RUNNING
    return any(isinstance(item, dict) and item.get("type") in shown for item in call.get("content") or [])


def advance(before: ToolStatus | None, reported: ToolStatus | None, *, progress: bool) -> ToolStatus:
    """The status a call has after an update reporting ``reported`` (None: it says nothing)."""
    if before is not None and before not in _RANK:
        return before  # done (or refused by us): what the agent says after changes nothing
    current: ToolStatus = before or "created"
    if reported is None:
        return current
    if reported == "running" and not progress and current in ("created", "pending_approval"):
        return current  # (OpenCode: in_progress, then the question) it runs once answered or seen
    if _RANK.get(reported, 3) < _RANK[current]:
        return current
    return reported


def command_result(call: dict[str, Any]) -> CommandResult | None:
    """A finished command's result from an update's ``rawOutput`` or text content; None when the
    update carries neither an exit code nor output (Gemini 0.61 sends none)."""
    raw = call.get("rawOutput")
    out = obj(raw)
    exit_code = _first_int(out.get("exitCode"), out.get("exit_code"), obj(out.get("metadata")).get("exit"))
    stdout: str | None = None
    if "output" in out:  # Qwen, OpenCode
        stdout = text(out.get("output"))
    elif isinstance(out.get("stdout"), str):  # codex-acp
        stdout = out["stdout"]
    elif isinstance(raw, str):
        stdout = raw
    else:
        stdout = content_text(call.get("content"))
    stderr = out.get("stderr") if isinstance(out.get("stderr"), str) and out.get("stderr") else None
    if exit_code is None and not stdout and not stderr:
        return None
    return CommandResult(
        exit_code=NO_EXIT_CODE if exit_code is None else exit_code, stdout=stdout or None, stderr=stderr
    )


def content_text(content: Any) -> str | None:
    """The text of an update's ``content`` blocks (diffs and terminals left out)."""
    texts = []
    for item in content or []:
        if isinstance(item, dict) and item.get("type") == "content":
            texts.append(text(obj(item.get("content")).get("text")))
    return "\n".join(t for t in texts if t) or None


def _first_int(*values: Any) -> int | None:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


@dataclass
class _Terminal:
    tool_id: str = ""
    output: str | None = None
    exit_code: int | None = None


class Terminals:
    """The commands an agent runs in our terminals, from its requests and our answers: what each
    printed so far and how it ended, by the tool call that shows the terminal."""

    def __init__(self) -> None:
        self._asks: dict[Any, tuple[str, str]] = {}  # agent request id -> (method, terminal id)
        self._terminals: dict[str, _Terminal] = {}
        self._by_tool: dict[str, str] = {}

    def asked(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        """The agent asked ``method`` (one of ``terminal/*``)."""
        _bounded(self._asks)
        self._asks[request_id] = (method, text(params.get("terminalId")))

    def __contains__(self, request_id: Any) -> bool:
        return request_id in self._asks

    def answered(self, request_id: Any, result: Any) -> str:
        """Our answer to a request of the agent's: the tool call it changed the result of, or ""."""
        method, terminal_id = self._asks.pop(request_id, ("", ""))
        res = obj(result)
        if method == "terminal/create":
            terminal_id = text(res.get("terminalId"))
            if terminal_id:
                _bounded(self._terminals)
                self._terminals.setdefault(terminal_id, _Terminal())
            return ""
        terminal = self._terminals.get(terminal_id)
        if terminal is None or not res:
            return ""  # (an error: a released terminal, say)
        if method == "terminal/output":
            if isinstance(res.get("output"), str):  # the whole output so far, not a delta
                terminal.output = res["output"]
            status = obj(res.get("exitStatus"))
            terminal.exit_code = _first_int(status.get("exitCode"), terminal.exit_code)
        elif method == "terminal/wait_for_exit":
            terminal.exit_code = _first_int(res.get("exitCode"), terminal.exit_code)
        else:
            return ""
        return terminal.tool_id

    def link(self, tool_id: str, call: dict[str, Any]) -> bool:
        """Note the terminals ``call`` shows (content of type ``terminal``): True if any is ours."""
        linked = False
        for item in call.get("content") or []:
            if isinstance(item, dict) and item.get("type") == "terminal":
                terminal = self._terminals.get(text(item.get("terminalId")))
                if terminal is not None:
                    terminal.tool_id = tool_id
                    self._by_tool[tool_id] = text(item.get("terminalId"))
                    linked = True
        return linked

    def ran(self, tool_id: str) -> bool:
        """Whether the command of ``tool_id`` ran in one of our terminals."""
        return tool_id in self._by_tool

    def result(self, tool_id: str) -> CommandResult | None:
        """What the command of ``tool_id`` printed and how it ended, so far (None: nothing yet)."""
        terminal = self._terminals.get(self._by_tool.get(tool_id, ""))
        if terminal is None or (not terminal.output and terminal.exit_code is None):
            return None
        return CommandResult(
            exit_code=NO_EXIT_CODE if terminal.exit_code is None else terminal.exit_code,
            stdout=terminal.output or None,
        )

    def forget(self, tool_id: str) -> None:
        """(The call's entry was released from a bounded log.)"""
        terminal_id = self._by_tool.pop(tool_id, None)
        if terminal_id is not None:
            self._terminals.pop(terminal_id, None)

    def tools(self) -> list[str]:
        return list(self._by_tool)


def _bounded(table: dict[Any, Any]) -> None:
    """Make room for one more in ``table``: an agent that never releases its terminals, or a log
    of requests never answered, cannot grow it without end."""
    while len(table) >= _MAX_TRACKED:
        del table[next(iter(table))]
