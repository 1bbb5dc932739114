"""Codex ``app-server`` JSON-RPC (both directions) -> unified entries.

Facts this relies on (codex-cli 0.169.0, fixtures/codex-app-server, protocols/codex.md §4):
- items arrive as ``item/started`` / ``item/completed`` notifications keyed by the model's own ids,
  with deltas in between (``item/agentMessage/delta``, ``item/reasoning/summaryTextDelta``,
  ``item/commandExecution/outputDelta``);
- ``turn/completed.turn.items`` holds only the final message, so everything comes from ``item/*``;
- after an interrupt no ``item/completed`` comes for what was in flight: we close it ourselves;
- ``thread/tokenUsage/updated`` carries the thread's running total: a turn's usage is the
  difference between the totals at its end and at its start;
- approvals are server requests (integer ids from 0) answered on stdin, which we read too.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from ..entries import (
    NO_EXIT_CODE,
    ApprovalInfo,
    ApprovalOutcome,
    AssistantMessage,
    CommandResult,
    CommandRun,
    FileEdit,
    GenericTool,
    Plan,
    PlanItem,
    Search,
    Thinking,
    TokenUsage,
    ToolResult,
    ToolStatus,
)
from ..wire.framing import DEFAULT_MAX_LINE_BYTES
from ..wire.lines import WireLine
from ..wire.notes import Approval, Note
from .actions import describe
from .base import DEFAULT_WINDOW, OPEN_STATUSES, SHARED_NOTES, LineNormalizer, Stream
from .built import tool_call, tool_result, tool_use, turn_usage, usage_entry
from .codex_items import display_command, file_change
from .compiled import mypyc_attr
from .evolve import evolve, make
from .kinds import ASSISTANT, SYSTEM, THINKING, USER
from .shape import relative
from .text import TextBuffer
from .values import count, rpc_id
from .values import obj as _dict
from .values import text as _s

__all__ = ["CodexAppServerNormalizer"]

_APPROVAL_METHODS = {
    "item/commandExecution/requestApproval",
    "item/fileChange/requestApproval",
    "execCommandApproval",
    "applyPatchApproval",
}
# Notifications that only report state we do not show.
_SILENT = {
    "thread/status/changed",
    "account/rateLimits/updated",
    "remoteControl/status/changed",
    "item/reasoning/summaryPartAdded",
    "thread/started",
    "mcpServer/startupStatus/updated",
    "skills/changed",
    "thread/name/updated",
    "thread/settings/updated",
    "thread/readState/changed",
    "fs/changed",
    "app/list/updated",
    "turn/moderationMetadata",
    "thread/queue/changed",
    "account/updated",
    "thread/goal/updated",
    "thread/goal/cleared",
}
# A turn's counts, from the thread's running totals (``inputTokens``, ``outputTokens``,
# ``cachedInputTokens``, ``cacheWriteInputTokens``, read in that order where they are used).
_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
)
_DECISIONS: dict[str, tuple[ApprovalOutcome, ToolStatus]] = {
    "accept": ("approved", "running"),
    "acceptForSession": ("approved", "running"),
    "approved": ("approved", "running"),
    "approved_for_session": ("approved", "running"),
    "decline": ("denied", "denied"),
    "denied": ("denied", "denied"),
    # cancel = decline and end the turn: to the person who chose it, a denial.
    "cancel": ("denied", "denied"),
    "abort": ("denied", "denied"),
}


@mypyc_attr(allow_interpreted_subclasses=True)
class CodexAppServerNormalizer(LineNormalizer):
    def __init__(self, max_line_bytes: int | None = None) -> None:
        super().__init__(max_line_bytes or DEFAULT_MAX_LINE_BYTES)
        self._our_requests: dict[Any, str] = {}  # our request id -> method (read from stdin)
        self._server_requests: dict[Any, str] = {}  # server request id -> item id
        self._items: dict[str, int] = {}  # item id -> entry index
        self._output: dict[str, TextBuffer] = {}  # item id -> command output streamed so far
        self._per_turn: dict[tuple[str, str], int] = {}  # (turn id, "diff"|"plan") -> entry index
        self._total: dict[str, int] = {}
        self._baseline: dict[str, int] = {}
        # The agent's own value, of any JSON type: validated when the turn's usage is built.  (Not
        # ``int | None``: compiled with mypyc, an annotation is checked on every assignment.)
        self._window: Any = None
        self._cwd: str | None = None
        self._shown_error: str | None = None
        self._waiting = False  # the thread's status says it waits on an approval
        self._starting: dict[str, bool] = {}  # items started, not yet running -> is a command (_promote)
        self._changes: dict[str, tuple[Any, FileEdit]] = {}  # file change started -> (its changes, action)

    def bound(self, window: int = DEFAULT_WINDOW) -> None:
        super().bound(window)
        # (Only a bounded log sweeps its tables: tracked when bound.  The hook ties the log and
        # this normalizer in a cycle, which an unbounded one, made per run, should not pay: it
        # would wait for the garbage collector instead of going when its run is dropped.)
        self.log.track(self._items)
        self.log.track(self._per_turn)
        self.log.track(self._changes, lambda _: False)  # (a bounded log drops them all: a shortcut)
        self.log.after_sweep(self._forget)

    def _forget(self) -> None:
        """(A bounded log dropped released items: their streamed output goes too.)"""
        for item_id in [i for i in self._output if i not in self._items]:
            del self._output[item_id]

    # --- dispatch -----------------------------------------------------------------------------

    def feed_line(self, wire: WireLine) -> None:
        stream = wire.stream
        if stream == "stderr":
            return  # tracing output, never protocol (protocols/codex.md §6)
        obj = wire.object
        if obj is None:
            if stream == "stdout":
                self.not_json("The agent", wire.text, wire.ts)
            return
        method = obj.get("method")
        if "id" in obj:
            self._message(wire, obj, method, stream)
            return
        # A notification, the agent's (nine lines in ten) or ours (stdin: none acts on anything).
        # (``type(...) is str``: orjson makes exact strings and dicts, where isinstance costs more.)
        if method == "thread/status/changed":
            params = obj.get("params")
            status = _dict((params if type(params) is dict else {}).get("status"))
            self._waiting = "waitingOnApproval" in (status.get("activeFlags") or [])
            return  # (a tenth of the lines: a notification shown as nothing, see _SILENT)
        if stream != "stdout":
            return
        if self._starting and method not in _APPROVAL_METHODS and method not in _SILENT:
            self._promote()  # (a line after an item's start that is not its approval: it runs)
        if type(method) is str:
            # One lookup for every method (a silent one, a third of the lines, finds None), where a
            # ``match`` compared the method with each case in turn.
            handle = _NOTIFICATIONS.get(method, _other_notification)
            if handle is not None:
                params = obj.get("params")
                handle(self, method, params if type(params) is dict else {}, wire.ts)
        else:
            self.shapeless_message(wire.text, wire.ts)

    def _message(self, wire: WireLine, obj: dict[str, Any], method: Any, stream: Stream) -> None:
        """A request or a response, either way (a line with an id)."""
        ts = wire.ts
        request_id = obj["id"]
        if type(request_id) is not int and type(request_id) is not str and rpc_id(request_id) is None:
            self.invalid_rpc_id(wire.text, stream, ts)
            return
        if method == "thread/status/changed":
            status = _dict(_dict(obj.get("params")).get("status"))
            self._waiting = "waitingOnApproval" in (status.get("activeFlags") or [])
        elif (
            self._starting
            and stream == "stdout"
            and method not in _APPROVAL_METHODS
            and method not in _SILENT
        ):
            self._promote()  # (a line after an item's start that is not its approval: it runs)
        if stream == "stdin":
            if type(method) is str:
                self._our_requests[request_id] = method
                if method == "turn/interrupt":  # (the one request of ours shown)
                    self.log.add(SYSTEM, "Interrupt requested", ts)
            else:
                self._client_answer(request_id, obj.get("result"), obj.get("error"))
        elif type(method) is str:
            self._server_request(request_id, method, _dict(obj.get("params")), ts)
        else:
            self._response(request_id, obj.get("result"), obj.get("error"), ts)

    def chunk_done(self, stream: Stream) -> None:
        if self._starting and stream == "stdout":
            self._promote(commands_only=True)  # nothing more came with a command's start: it runs

    def _promote(self, *, commands_only: bool = False) -> None:
        """Items started and not waiting for an approval are running.  Codex starts an item and
        then asks for its approval, in the next line (0.169.0): a started item is shown running only
        once it is clear no question comes first, so its status never moves back: at the next line
        that is not its approval, or, for a command, at the end of the chunk its start came in (Codex
        writes a command's question with its start; a file change's comes in a write of its own);
        never while the thread's status says it is waiting on an approval."""
        if self._waiting:
            return  # the thread says a question is open: the started item waits for it
        for item_id, command in list(self._starting.items()):
            if commands_only and not command:
                continue
            del self._starting[item_id]
            index = self._items.get(item_id)
            tool = self.log.tool(index) if index is not None else None
            if tool is not None and index is not None and tool.status == "created":
                self.log.update_tool(index, status="running")

    # --- notifications, each one's handler (see _NOTIFICATIONS) -----------------------------------

    def _on_delta(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        # (A fifth of the lines: the two fields read as _s would, a string as it is.)
        item_id, delta = p.get("itemId"), p.get("delta")
        index = self._items.get(item_id if type(item_id) is str else _s(item_id))
        if index is not None:
            if type(delta) is not str:
                delta = _s(delta)
            if delta:
                self.log.append_text(index, delta)

    def _on_token_usage(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        usage = _dict(p.get("tokenUsage"))
        get = _dict(usage.get("total")).get
        a, b, c, d = (
            get("inputTokens"),
            get("outputTokens"),
            get("cachedInputTokens"),
            get("cacheWriteInputTokens"),
        )
        # (Each an exact int as it is, anything else through count: no call per field.)
        self._total = {
            "inputTokens": a if type(a) is int else count(a),
            "outputTokens": b if type(b) is int else count(b),
            "cachedInputTokens": c if type(c) is int else count(c),
            "cacheWriteInputTokens": d if type(d) is int else count(d),
        }
        self._window = usage.get("modelContextWindow") or self._window

    def _on_turn_started(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        self._baseline = self._total  # (replaced whole, never changed in place: shared)

    def _on_warning(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        text = _s(p.get("summary") or p.get("message") or p.get("details")) or method
        self.log.add(SYSTEM, text, ts, notice=method)

    def _on_compacted(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        self.log.add(SYSTEM, "Conversation compacted", ts)

    def _on_other(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        self.log.add(SYSTEM, f"`{method}` notification", ts, raw={"method": method, "params": p})

    # --- responses to our requests, and our answers to the agent's ------------------------------

    def _response(self, request_id: Any, result: Any, error: Any, ts: datetime | None) -> None:
        if request_id not in self._our_requests:
            self.unknown_response(request_id, result, error, ts)
            return
        method = self._our_requests.pop(request_id)
        if error is not None:
            message = _s(_dict(error).get("message")) or _s(error)
            code = "resume_failed" if method in ("thread/resume", "thread/fork") else "protocol_error"
            self.log.error(f"{method or 'request'} failed: {message}", code, ts, rpc_error=error)
            return
        if method in ("thread/start", "thread/resume", "thread/fork"):
            res = _dict(result)
            thread = _dict(res.get("thread"))
            self.log.session_id = _s(thread.get("id")) or self.log.session_id
            self.log.model = _s(res.get("model")) or self.log.model
            self._cwd = _s(res.get("cwd") or thread.get("cwd")) or self._cwd
            self.agent_cwd(self._cwd)
            verb = {"thread/start": "started", "thread/resume": "resumed", "thread/fork": "forked"}[method]
            text = f"Thread `{self.log.session_id}` {verb} with model `{self.log.model}`"
            self.log.add(
                SYSTEM,
                text,
                ts,
                cwd=self._cwd,
                sandbox=res.get("sandbox"),
                approval_policy=res.get("approvalPolicy"),
            )

    def _server_request(self, request_id: Any, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        if method not in _APPROVAL_METHODS:
            self.log.add(SYSTEM, f"The agent asked `{method}`, which this client does not serve", ts)
            return
        item_id = _s(p.get("itemId") or p.get("callId"))
        self._starting.pop(item_id, None)
        self._server_requests[request_id] = item_id
        index = self._items.get(item_id)
        if index is None:  # an approval before its item: show the call from the request itself
            command = p.get("command")
            action = (
                make(CommandRun, command=display_command(_command_text(command)))
                if command
                else make(GenericTool, tool_name=method, args=p)
            )
            name = "commandExecution" if command else "fileChange"
            index = self._add_tool(item_id, name, action, ts)
        approval = make(ApprovalInfo, request_id=str(request_id), reason=_s(p.get("reason")) or None)
        self.log.update_tool(index, status="pending_approval", approval=approval)

    def _request_resolved(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        request_id = p.get("requestId")
        # Sent after our answer (nothing left to do then); before it, the server settled the
        # request itself (an interrupted turn), and the question we were asking was taken back.
        item_id = self._server_requests.pop(_request_key(request_id), None)
        index = self._items.get(item_id or "")
        tool = self.log.tool(index) if index is not None else None
        if tool is None or index is None or tool.status != "pending_approval":
            return
        approval = make(
            ApprovalInfo,
            request_id=str(request_id),
            decision="cancelled",
            reason="withdrawn by the agent before an answer",
        )
        self.log.update_tool(index, status="cancelled", approval=approval)

    def _client_answer(self, request_id: Any, result: Any, error: Any) -> None:
        item_id = self._server_requests.pop(request_id, None)
        index = self._items.get(item_id or "")
        tool = self.log.tool(index) if index is not None else None
        if tool is None or index is None:
            return
        raw = _dict(result).get("decision")
        key = raw if isinstance(raw, str) else next(iter(raw), "") if isinstance(raw, dict) else ""
        decision, status = _DECISIONS.get("accept" if key.startswith("accept") else key, ("denied", "denied"))
        if error is not None:
            decision, status = "denied", "denied"
        if tool.approval is not None and tool.approval.decision == "timed_out":
            decision, status = "timed_out", "timed_out"
        approval = make(
            ApprovalInfo,
            request_id=str(request_id),
            decision=decision,
            for_session=key == "acceptForSession",
            reason=tool.approval.reason if tool.approval else None,
        )
        self.log.update_tool(
            index, status=status if tool.status in OPEN_STATUSES else tool.status, approval=approval
        )

    # (A replay's note of another kind, the agent's exit in every run, is then not read at all.)
    notes_read: ClassVar[frozenset[str] | None] = SHARED_NOTES | {Approval.kind}

    def on_note(self, event: Note, ts: datetime | None) -> None:
        if not isinstance(event, Approval):
            super().on_note(event, ts)
            return
        index = self._items.get(self._server_requests.get(_request_key(event.request_id), ""))
        tool = self.log.tool(index) if index is not None else None
        if tool is not None and index is not None and event.decision == "timed_out":
            reason = event.reason or None
            approval = make(ApprovalInfo, request_id=event.request_id, decision="timed_out", reason=reason)
            self.log.update_tool(index, status="timed_out", approval=approval)
        elif (
            tool is not None
            and index is not None
            and tool.approval is not None
            and event.reason
            and event.decision != "approved"
        ):
            # The person's reason for a refusal: Codex's answer has no field for it, so the agent
            # never hears it; the entry keeps it (it comes before our answer, which carries it on).
            self.log.update_tool(index, approval=evolve(tool.approval, reason=event.reason))

    # --- items --------------------------------------------------------------------------------

    def _item(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        item, completed = p.get("item"), method == "item/completed"
        if type(item) is not dict:
            item = {}
        item_id, kind = item.get("id"), item.get("type")
        if type(item_id) is not str:  # (read as _s would: a string as it is, without a call)
            item_id = _s(item_id)
        if type(kind) is not str:
            kind = _s(kind)
        match kind:
            case "userMessage":
                if not completed:
                    text = "\n".join(
                        [_s(c.get("text")) for c in item.get("content") or [] if type(c) is dict]
                    )
                    self._items[item_id] = self.log.add(USER, text, ts)
            case "agentMessage":
                said = item.get("text")
                said = said if type(said) is str else _s(said)
                index = self._items.get(item_id)  # (_text_item, inline: a message is one line in ten)
                if index is None:
                    self._items[item_id] = self.log.add(ASSISTANT, said, ts)
                elif completed and said and not self.log.streamed(index).equals(said):
                    self.log.replace(index, content=said)
            case "reasoning":
                parts = [_s(x) for x in (item.get("summary") or item.get("content") or [])]
                self._text_item(item_id, THINKING, "\n\n".join(parts), completed, ts)
            case "commandExecution":
                self._command(item_id, item, completed, ts)
            case "fileChange":
                self._file_change(item_id, item, completed, ts)
            case "webSearch":
                self._tool_item(
                    item_id, "webSearch", make(Search, query=_s(item.get("query"))), completed, ts
                )
            case "plan":
                steps = [
                    line.strip("-* ").strip() for line in _s(item.get("text")).splitlines() if line.strip()
                ]
                self._plan_entry(f"item:{item_id}", tuple(make(PlanItem, content=s) for s in steps), ts)
            case "contextCompaction":
                if completed:
                    self.log.add(SYSTEM, "Conversation compacted", ts)
            case _:
                self._other_tool(item_id, kind, item, completed, ts)

    def _other_tool(
        self, item_id: str, kind: str, item: dict[str, Any], completed: bool, ts: datetime | None
    ) -> None:
        """An MCP tool call, a dynamic (client-defined) tool call, or an item kind newer than this
        code: named after the tool where the item names one, with its arguments and output."""
        tool = _s(item.get("tool"))
        if kind == "mcpToolCall":
            name = f"mcp:{_s(item.get('server'))}/{tool}"
        elif tool:  # dynamicToolCall: {tool, namespace?, arguments, contentItems, success}
            name = f"{_s(item.get('namespace'))}/{tool}" if item.get("namespace") else tool
        else:
            name = kind
        output = item.get("result")
        if output is None and isinstance(item.get("contentItems"), list):
            output = _content_items(item["contentItems"])
        error = item.get("error")
        failed = item.get("status") == "failed" or item.get("success") is False or bool(error)
        action = make(GenericTool, tool_name=name, args=item.get("arguments"), result=output)
        self._tool_item(item_id, name, action, completed, ts, failed=failed)
        index = self._items.get(item_id)
        if completed and index is not None and (output is not None or error):
            text = output if isinstance(output, str) else None
            problem = _s(_dict(error).get("message")) or _s(error) or text or "failed"
            self.log.update_tool(
                index,
                result=make(
                    ToolResult,
                    success=not failed,
                    data=output if not failed else None,
                    error=problem if failed else None,
                ),
            )

    def _text_item(
        self,
        item_id: str,
        type_: AssistantMessage | Thinking,
        text: str,
        completed: bool,
        ts: datetime | None,
    ) -> None:
        index = self._items.get(item_id)
        if index is None:
            self._items[item_id] = self.log.add(type_, text, ts)
        elif completed and text and not self.log.streamed(index).equals(text):
            self.log.replace(index, content=text)

    def _command(self, item_id: str, item: dict[str, Any], completed: bool, ts: datetime | None) -> None:
        command = display_command(_s(item.get("command")))
        index = self._items.get(item_id)
        tool = self.log.tool(index) if index is not None else None
        if index is None or tool is None:  # (an id that was a message's: the call gets its own entry)
            index = self._add_tool(item_id, "commandExecution", make(CommandRun, command=command), ts)
            tool = self.log.tool(index)
        assert tool is not None
        status = _s(item.get("status"))
        if not completed and status == "inProgress":
            if tool.status == "created":
                self._starting[item_id] = True  # running unless an approval is asked first (_promote)
            return
        exit_code = item.get("exitCode")
        output = item.get("aggregatedOutput")
        stdout = output if isinstance(output, str) else self._streamed_output(item_id)
        # (a declined command never ran: no result of it, rather than one that knows nothing)
        result = (
            CommandResult(
                exit_code=exit_code if isinstance(exit_code, int) else NO_EXIT_CODE,
                stdout=stdout,
                duration_ms=item.get("durationMs"),
            )
            if isinstance(exit_code, int) or stdout
            else None
        )
        new: ToolStatus = {
            "completed": "success" if exit_code in (0, None) else "failed",
            "failed": "failed",
            "declined": "denied",
        }.get(status, tool.status)
        if tool.status in ("timed_out", "cancelled") or (tool.status == "denied" and new != "success"):
            new = tool.status
        outcome = tool_result(
            new == "success",
            stdout if new == "success" else None,
            None if new == "success" else stdout or status,
        )
        self.log.update_tool(
            index, status=new, action=make(CommandRun, command=command, result=result), result=outcome
        )

    def _output_delta(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        item_id, delta = _s(p.get("itemId")), _s(p.get("delta"))
        index = self._items.get(item_id)
        tool = self.log.tool(index) if index is not None else None
        if tool is None or index is None or not isinstance(tool.action, CommandRun):
            return
        buf = self._output.get(item_id)
        if buf is None:
            buf = self._output[item_id] = TextBuffer()
        buf.append(delta)
        # The output so far goes into the entry once per batch of patches, not once per delta.
        self.log.refresh(index, lambda: self._show_output(index, buf))

    def _show_output(self, index: int, buf: TextBuffer) -> None:
        tool = self.log.tool(index)
        if tool is not None and isinstance(tool.action, CommandRun):
            result = make(CommandResult, stdout=buf.text())
            status = "running" if tool.status in ("created", "pending_approval") else tool.status
            self.log.update_tool(index, action=evolve(tool.action, result=result), status=status)

    def _streamed_output(self, item_id: str) -> str | None:
        buf = self._output.get(item_id)
        return buf.text() if buf is not None else None

    def _file_change(self, item_id: str, item: dict[str, Any], completed: bool, ts: datetime | None) -> None:
        raw = item.get("changes")
        started = self._changes.pop(item_id, None) if completed else self._changes.get(item_id)
        if started is not None and started[0] == raw:
            # The files it started with (its completion repeats them): the action they made, not
            # their diffs made again (an added file's is a diff of its whole content).
            action = started[1]
        else:
            changes = [c for c in raw or [] if isinstance(c, dict)]
            paths = [_s(c.get("path")) for c in changes]
            action = make(
                FileEdit,
                path=paths[0] if len(paths) == 1 else ", ".join(paths),
                changes=tuple(
                    file_change(_s(c.get("path")), _s(_dict(c.get("kind")).get("type")), c.get("diff"))
                    for c in changes
                ),
            )
            if not completed:
                self._changes[item_id] = (raw, action)  # (the parsed line's own list: nothing copied)
        status = _s(item.get("status"))
        self._tool_item(
            item_id,
            "fileChange",
            action,
            completed,
            ts,
            failed=status == "failed",
            declined=status == "declined",
        )

    def _tool_item(
        self,
        item_id: str,
        name: str,
        action: Any,
        completed: bool,
        ts: datetime | None,
        *,
        failed: bool = False,
        declined: bool = False,
    ) -> None:
        index = self._items.get(item_id)
        tool = self.log.tool(index) if index is not None else None
        if index is None or tool is None:  # (an id that was a message's: the call gets its own entry)
            # A new call is built once, in the state this line leaves it in: what adding it and
            # then updating it would give, without the second copy.
            status: ToolStatus = "running"
            result = None
            if completed:
                status = "denied" if declined else "failed" if failed else "success"
                result = tool_result(status == "success", None, None)
            elif name == "fileChange":
                status = "created"
                self._starting[item_id] = False  # (it may wait for an approval, like a command)
            self._add_tool(item_id, name, action, ts, status=status, result=result)
            return
        if not completed:
            if tool.status == "created" and name == "fileChange":
                self._starting[item_id] = False  # (it may wait for an approval, like a command)
                self.log.update_tool(index, action=action)
            else:
                running = tool.status == "created"
                self.log.update_tool(index, action=action, status="running" if running else tool.status)
            return
        new: ToolStatus = "denied" if declined else "failed" if failed else "success"
        if tool.status in ("denied", "timed_out", "cancelled"):
            new = tool.status
        self.log.update_tool(
            index,
            action=action,
            status=new,
            result=tool_result(new == "success", None, None),
            content=describe(action, self._cwd),
        )

    # --- turns --------------------------------------------------------------------------------

    def _turn_completed(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        turn = _dict(p.get("turn"))
        status = turn.get("status")
        status = (status if type(status) is str else _s(status)) or "completed"
        self.turn_statuses.append(status)
        total, base = self._total, self._baseline
        # (The totals are replaced whole, never changed in place: the baseline shares their dict.)
        self._baseline = total
        counts = (
            total.get("inputTokens", 0) - base.get("inputTokens", 0),
            total.get("outputTokens", 0) - base.get("outputTokens", 0),
            total.get("cachedInputTokens", 0) - base.get("cachedInputTokens", 0),
            total.get("cacheWriteInputTokens", 0) - base.get("cacheWriteInputTokens", 0),
        )  # (spelled out: no comprehension's frame per turn)
        # Built as it is when every value is an int (the counts always are); the context window
        # is the agent's own value, validated (coerced or refused) when it is anything else.
        window = self._window
        if window is None or type(window) is int:
            tokens = turn_usage(counts[0], counts[1], counts[2], counts[3], None, window)
        else:
            fields = dict(zip(_USAGE_FIELDS, counts, strict=True))
            tokens = TokenUsage.model_validate({**fields, "context_window": window})
        self.log.add(
            usage_entry(tokens),
            "",
            ts,
            turn_id=turn.get("id"),
            duration_ms=turn.get("durationMs"),
        )
        if status == "interrupted":
            self.log.error("The turn was interrupted", "interrupted", ts)
            self.log.close_open_tools("cancelled")
        elif status == "failed":
            error = _s(_dict(turn.get("error")).get("message"))
            if error != self._shown_error:
                self.log.error(error or "the turn failed", "agent_error", ts)
            self.log.close_open_tools("cancelled")
        self._shown_error = None

    def _error(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        error = _dict(p.get("error"))
        message = _s(error.get("message")) or "error"
        if p.get("willRetry"):
            self.log.error(message, "api_retry", ts, details=error.get("additionalDetails"))
            return
        self._shown_error = message
        self.log.error(
            message,
            "api_error",
            ts,
            details=error.get("additionalDetails"),
            codex_error=error.get("codexErrorInfo"),
        )

    def _turn_diff(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        turn_id, diff = _s(p.get("turnId")), _s(p.get("diff"))
        # The turn's whole diff repeats the file changes' own diffs: named here, kept whole in the
        # metadata (``turnDiff``), never shown twice as text.
        files = sorted({line[6:] for line in diff.splitlines() if line.startswith("+++ b/")})
        names = ", ".join(f"`{relative(f if f.startswith('/') else '/' + f, self.work_dir)}`" for f in files)
        content = f"The turn changed {names}" if names else "The turn changed files"
        index = self._per_turn.get((turn_id, "diff"))
        if index is None:
            self._per_turn[(turn_id, "diff")] = self.log.add(SYSTEM, content, ts, turn_diff=diff)
        else:
            self.log.replace(index, content=content, metadata=self.log.metadata(turn_diff=diff))

    def _plan(self, method: str, p: dict[str, Any], ts: datetime | None) -> None:
        turn_id = _s(p.get("turnId"))
        statuses = {"pending": "pending", "inProgress": "in_progress", "completed": "completed"}
        items = tuple(
            make(PlanItem, content=_s(s.get("step")), status=statuses.get(_s(s.get("status")), "pending"))
            for s in p.get("plan") or []
            if isinstance(s, dict)
        )
        self._plan_entry(turn_id, items, ts, _s(p.get("explanation")) or "Plan")

    def _plan_entry(
        self, key: str, items: tuple[PlanItem, ...], ts: datetime | None, text: str = "Plan"
    ) -> None:
        index = self._per_turn.get((key, "plan"))
        self._per_turn[(key, "plan")] = self.log.put(index, make(Plan, items=items), text, ts)

    # --- helpers ------------------------------------------------------------------------------

    def _add_tool(
        self,
        item_id: str,
        name: str,
        action: Any,
        ts: datetime | None,
        status: ToolStatus = "created",
        result: ToolResult | None = None,
    ) -> int:
        tool = tool_use(tool_call(name, action, status, result, item_id))
        index = self._items[item_id] = self.log.add(tool, describe(action, self._cwd), ts)
        return index

    def close(self, ts: datetime | None) -> None:
        self.log.close_open_tools("cancelled")


_Handler = Callable[[CodexAppServerNormalizer, str, dict[str, Any], "datetime | None"], None]
_other_notification: _Handler = CodexAppServerNormalizer._on_other
_NOTIFICATIONS: dict[str, _Handler | None] = {
    **dict.fromkeys(_SILENT),  # (None: shown as nothing)
    "item/agentMessage/delta": CodexAppServerNormalizer._on_delta,
    "item/reasoning/summaryTextDelta": CodexAppServerNormalizer._on_delta,
    "item/reasoning/textDelta": CodexAppServerNormalizer._on_delta,
    "item/started": CodexAppServerNormalizer._item,
    "item/completed": CodexAppServerNormalizer._item,
    "thread/tokenUsage/updated": CodexAppServerNormalizer._on_token_usage,
    "turn/started": CodexAppServerNormalizer._on_turn_started,
    "turn/completed": CodexAppServerNormalizer._turn_completed,
    "configWarning": CodexAppServerNormalizer._on_warning,
    "warning": CodexAppServerNormalizer._on_warning,
    "deprecationNotice": CodexAppServerNormalizer._on_warning,
    "guardianWarning": CodexAppServerNormalizer._on_warning,
    "serverRequest/resolved": CodexAppServerNormalizer._request_resolved,
    "turn/diff/updated": CodexAppServerNormalizer._turn_diff,
    "item/commandExecution/outputDelta": CodexAppServerNormalizer._output_delta,
    "turn/plan/updated": CodexAppServerNormalizer._plan,
    "error": CodexAppServerNormalizer._error,
    "thread/compacted": CodexAppServerNormalizer._on_compacted,
}
"""A notification's handler by its method; a method not here is shown as what it is (_on_other)."""


def _content_items(items: list[Any]) -> str | list[Any]:
    """A dynamic tool's output: its text items joined (images and the like kept as they came)."""
    texts = [_s(i.get("text")) for i in items if isinstance(i, dict) and i.get("type") == "inputText"]
    return "\n".join(texts) if len(texts) == len(items) else items


def _command_text(command: Any) -> str:
    return " ".join(command) if isinstance(command, list) else _s(command)


def _request_key(value: Any) -> Any:
    # Our notes carry the request id as text; Codex's server ids are integers.
    return int(value) if isinstance(value, str) and value.isdigit() else value
