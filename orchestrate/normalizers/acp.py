"""Agent Client Protocol traffic (both directions) -> unified entries.

The messages are read as plain JSON, not through the ``acp.schema`` models: agents deviate from the
schema in small ways (Gemini announces a mode change as a message chunk, Qwen adds vendor methods and
``_meta`` everywhere) and a deviation must show as what it is, never stop the stream.  The tests
check that the recorded traffic of the real agents validates against the schema models.

Facts this relies on (gemini-cli 0.61.0, qwen-code 0.24.4, protocols/acp-gemini-qwen.md):
- Gemini sends ``session/request_permission`` for a call it never announced with ``tool_call``, and
  no update at all for a rejected one;
- Qwen reports usage in empty ``agent_message_chunk`` updates (``_meta.usage``), Gemini in the
  prompt response (``_meta.quota``);
- the user's prompt is not echoed (except when a session is loaded): it is read from stdin.

ACP 1.x (the schema of the ``agent-client-protocol`` package): a loaded session's replayed history
(the updates between our ``session/load`` and our next prompt) is shown once, as one system entry
that says it is history, never as new messages or tool calls; ``usage_update`` gives the turn's
context window and cost (cumulative per session: a turn's cost is the difference); mode, config,
session info and command list changes are one quiet system entry each, revised in place and never
splitting a message; chunks of one ``messageId`` are one message, and a chunk that repeats the
whole message so far (deltas, then the text whole) adds nothing; ``elicitation/create`` is shown
with the answer it got.
"""

from __future__ import annotations

import operator
import re
import shlex
from datetime import datetime
from typing import Any, ClassVar

from ..entries import (
    ActionType,
    ApprovalInfo,
    CommandRun,
    EntryType,
    FileChange,
    FileEdit,
    FileRead,
    GenericTool,
    Plan,
    PlanItem,
    Search,
    TokenUsage,
    ToolStatus,
    ToolUseEntry,
    WebFetch,
)
from ..wire.framing import DEFAULT_MAX_LINE_BYTES
from ..wire.lines import Stream, WireLine
from ..wire.notes import Approval, Note, Stopped
from .acp_output import Terminals, advance, command_result, content_text, shows_progress
from .actions import describe
from .base import DEFAULT_WINDOW, OPEN_STATUSES, LineNormalizer
from .built import command_run, tool_result, tool_use, turn_usage, usage_entry
from .claude_tools import plan_items
from .codex_items import display_command
from .compiled import mypyc_attr
from .diffs import diff_texts
from .evolve import build, evolve, make
from .kinds import ASSISTANT, SYSTEM, THINKING, USER
from .values import count, obj, rpc_id, text

__all__ = ["AcpNormalizer"]

_STATUS: dict[str, ToolStatus] = {
    "pending": "created",
    "in_progress": "running",
    "completed": "success",
    "failed": "failed",
}
_PLAN_STATUS = {"pending": "pending", "in_progress": "in_progress", "completed": "completed"}
_CHUNK_TYPES: dict[str, EntryType] = {"agent_message_chunk": ASSISTANT, "agent_thought_chunk": THINKING}
_MODE_MARK = "[MODE_UPDATE]"  # Gemini 0.61.0 announces a mode change as an agent message chunk
_RETRY_NOTICE = re.compile(r"^Info: [^\n]*Retrying\.\.\.\s*$")  # Copilot 1.0.102, a retried model call
# Vendor requests and notifications that carry nothing to show (Qwen 0.24.4 sends these every turn).
_SILENT = {
    "craft/drainMidTurnQueue",
    "qwen/notify/session/prompt-suggestion",
    "$/cancel_request",  # the answer the withdrawn request gets shows what became of it
    "elicitation/complete",
}
_REPLAYED = {
    "user_message_chunk",
    "agent_message_chunk",
    "agent_thought_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
}
_HISTORY_ROLES = {"user_message_chunk": "User", "agent_message_chunk": "Assistant"}
_ELICITATION_ANSWERS = {"accept": "answered", "decline": "declined", "cancel": "cancelled"}
# Agents that send their todo list as a tool call, not a `plan` update (OpenCode 1.18.33 `todowrite`):
# it is shown as the plan it is, as Claude's TodoWrite is.
_TODO_TOOLS = {"todowrite", "todo_write", "write_todos"}
_NAME = operator.itemgetter("name")
_IS_STR = str.__instancecheck__
# The actions the log reshapes (their paths made relative to the working directory): by exact
# class, as shape.py tells them apart.  (_action makes no FileWrite: the shaping does.)
_SHAPED = frozenset({FileRead, FileEdit, Search})


@mypyc_attr(allow_interpreted_subclasses=True)
class AcpNormalizer(LineNormalizer):
    def __init__(self, max_line_bytes: int | None = None) -> None:
        super().__init__(max_line_bytes or DEFAULT_MAX_LINE_BYTES)
        self._ours: dict[Any, tuple[str, dict[str, Any]]] = {}  # our request id -> (method, params)
        self._permissions: dict[Any, tuple[str, dict[str, str]]] = {}  # agent request id -> (tool id, kinds)
        self._permission_ids: dict[str, Any] = {}  # the same ids as our notes spell them
        self._tools: dict[str, int] = {}
        self._raw_input: dict[str, dict[str, Any]] = {}
        # tool id -> (the action last given to the log, unshaped; the cwd and work_dir then)
        self._shaped: dict[str, tuple[ActionType, str | None, str | None]] = {}
        # The text entry chunks are flowing into: (their kind, its index, their messageId where the
        # agent gives one).  (One attribute for the three: at 30 attributes an instance's
        # __dict__ stops sharing its class's keys, and every attribute read slows down.)
        self._open: tuple[str, int, Any] | None = None
        self._open_pieces = 0
        self._open_length = 0  # its length in characters
        self._quiet: dict[str, int] = {}  # mode, config, session info: one entry each, revised
        self._history: int | None = None  # the entry a loaded session's replay goes into
        self._replaying = False
        self._history_role = ""
        self._history_tools: set[str] = set()
        self._elicitations: dict[Any, tuple[int, str]] = {}  # agent request id -> (entry, question)
        self._context_window: int | None = None
        self._cost: float | None = None  # the session's cost so far (usage_update, cumulative)
        self._cost_billed = 0.0  # the part of it already given to earlier turns
        self._plan: int | None = None
        self._todo_tools: set[str] = set()
        self._commands: int | None = None
        self._usage: dict[str, int] = {}
        self._cwd: str | None = None
        self._saw_client = False  # any line of ours (stdin): else this is a capture of stdout alone
        self._terminals = Terminals()  # commands run in our terminals: their output, by tool call

    def bound(self, window: int = DEFAULT_WINDOW) -> None:
        super().bound(window)
        # (Only a bounded log sweeps its tables: tracked when bound.  The hook ties the log and
        # this normalizer in a cycle, which an unbounded one, made per run, should not pay: it
        # would wait for the garbage collector instead of going when its run is dropped.)
        self.log.track(self._tools)
        self.log.after_sweep(self._forget)

    def _forget(self) -> None:
        """(A bounded log dropped released tool calls: their raw input goes too.)"""
        for tool_id in [t for t in self._raw_input if t not in self._tools]:
            del self._raw_input[tool_id]
        for tool_id in [t for t in self._shaped if t not in self._tools]:
            del self._shaped[tool_id]
        for tool_id in [t for t in self._terminals.tools() if t not in self._tools]:
            self._terminals.forget(tool_id)

    # --- dispatch -----------------------------------------------------------------------------

    # The agent's stderr is its log, not the protocol: it shows nothing, so it is not even framed
    # (Gemini writes a few lines of it per run; the peer reads stdout alone).
    framed: ClassVar[frozenset[Stream]] = frozenset(("stdout", "stdin"))

    def feed_line(self, wire: WireLine) -> None:
        msg = wire.object
        if msg is None:
            if wire.stream == "stdout":
                self.not_json("The agent", wire.text, wire.ts)
            return
        method = msg.get("method")
        if "id" not in msg:
            stream = wire.stream
            if stream == "stdin":
                self._client(msg, method, False, wire.ts)
            elif method == "session/update":  # (most lines: each piece the agent streams)
                # (obj's two checks inline: a call less, twice, on most lines)
                params = msg.get("params")
                update = params.get("update") if isinstance(params, dict) else None
                if not isinstance(update, dict):
                    update = {}
                kind = update.get("sessionUpdate")
                if kind == "agent_message_chunk" and not self._replaying:
                    self._chunk(kind, update, wire.ts)  # (what _update does with it, a call less)
                else:
                    self._update(update, wire.ts)
            elif isinstance(method, str):
                self._notification(method, obj(msg.get("params")), wire.ts)
            else:
                self.shapeless_message(wire.text, wire.ts)
            return
        request_id = msg["id"]
        stream = wire.stream
        # (rpc_id's answer for the usual ids, an int or a string, without the call)
        if type(request_id) is not int and type(request_id) is not str and rpc_id(request_id) is None:
            self.invalid_rpc_id(wire.text, stream, wire.ts)
        elif stream == "stdin":
            self._client(msg, method, True, wire.ts)
        elif isinstance(method, str):
            self._agent_request(request_id, method, obj(msg.get("params")), wire.ts)
        else:
            self._response(request_id, msg.get("result"), msg.get("error"), wire.ts)

    def _notification(self, method: str, params: dict[str, Any], ts: datetime | None) -> None:
        """A notification of the agent's other than ``session/update``."""
        if method.endswith("mode-update"):
            self._quiet_entry("mode", f"Mode: {text(params.get('currentModeId'))}", ts)
        elif method not in _SILENT:
            self._system(f"`{method}` notification", ts, raw={"method": method, "params": params})

    # --- session/update -----------------------------------------------------------------------

    def _update(self, update: dict[str, Any], ts: datetime | None) -> None:
        kind = update.get("sessionUpdate")
        if not isinstance(kind, str):  # (text's check inline: a call less per line)
            kind = text(kind)
        if self._replaying and kind in _REPLAYED:
            self._replayed(kind, update, ts)
            return
        match kind:
            case "agent_message_chunk" | "agent_thought_chunk" | "user_message_chunk":
                self._chunk(kind, update, ts)
            case "tool_call" | "tool_call_update":
                self._tool_call(update, ts)
            case "plan":
                self._plan_update(update, ts)
            case "available_commands_update":
                names = _command_names(update.get("availableCommands") or [])
                # (", /".join: one join over the names, not a string formatted per name)
                content = f"{len(names)} commands available: " + ("/" + ", /".join(names) if names else "")
                if self._commands is None:  # (it can arrive mid-message: the text goes on after it)
                    self._commands = self.log.add(SYSTEM, content, ts, commands=names)
                else:
                    self.log.replace(self._commands, content=content)
            case "current_mode_update":
                self._quiet_entry("mode", f"Mode: {text(update.get('currentModeId'))}", ts)
            case "config_option_update":
                self._config(update.get("configOptions"), ts)
            case "session_info_update":
                title = text(update.get("title"))
                self._quiet_entry("info", f"Session title: {title}" if title else "Session title cleared", ts)
            case "usage_update":
                self._usage_update(update)
            case _:
                self._system(f"`{kind or 'unknown'}` update", ts, raw=update)

    def _chunk(self, kind: str, update: dict[str, Any], ts: datetime | None) -> None:
        meta = update.get("_meta")
        if meta:
            usage = obj(obj(meta).get("usage"))
            for key, value in usage.items():  # Qwen: one usage report per model call, on an empty chunk
                if isinstance(value, int):
                    self._usage[key] = self._usage.get(key, 0) + value
        # (obj's and text's checks inline: a chunk is the most frequent line)
        content = update.get("content")
        if not isinstance(content, dict):
            content = {}
        if content.get("type", "text") == "text":
            chunk = content.get("text")
            if not isinstance(chunk, str):
                chunk = text(chunk)
        else:
            chunk = f"[{content.get('type')}]"
        if not chunk:
            return
        open_ = self._open
        if kind == "agent_message_chunk":
            if chunk.startswith(_MODE_MARK):
                self._quiet_entry("mode", f"Mode: {chunk[len(_MODE_MARK) :].strip()}", ts)
                return
            if open_ is None and _RETRY_NOTICE.match(chunk):
                # Copilot 1.0.102 tells of a retried model call as a chunk of its own: a retry, not text.
                self.log.error(chunk.removeprefix("Info: ").strip(), "api_retry", ts)
                return
        message = update.get("messageId")
        if open_ is not None and open_[0] == kind and message == open_[2]:
            length = len(chunk)
            # (the text so far is asked only when the piece is as long as it: its length is kept
            # here, as the pieces were appended; the open entry changes no other way)
            if (
                self._open_pieces > 1
                and length == self._open_length
                and self.log.streamed(open_[1]).equals(chunk)
            ):
                return  # the message again, whole, after its deltas: shown once
            self.log.append_text(open_[1], chunk)
            self._open_pieces += 1
            self._open_length += length
            return
        self._open = (kind, self.log.add(_CHUNK_TYPES.get(kind, USER), chunk, ts), message)
        self._open_pieces, self._open_length = 1, len(chunk)

    def _system(self, content: str, ts: datetime | None, *, breaks_text: bool = True, **extra: Any) -> int:
        """A system entry; it ends the message chunks flow into, unless ``breaks_text`` is False.
        (The entries of every run, the agent's, the session's and the command list's, are added
        by their handlers themselves: the metadata keywords packed once, not twice.)"""
        if breaks_text:
            self._open = None
        if extra:
            return self.log.add(SYSTEM, content, ts, **extra)
        return self.log.add(SYSTEM, content, ts)

    def _quiet_entry(self, key: str, content: str, ts: datetime | None) -> None:
        """A state the agent reports (its mode, its config, the session's title): one entry per
        ``key``, revised in place, that does not split the message it arrives in."""
        index = self._quiet.get(key)
        if index is not None and index in self.log:
            self.log.replace(index, content=content)
        else:
            self._quiet[key] = self._system(content, ts, breaks_text=False)

    def _config(self, options: Any, ts: datetime | None) -> None:
        shown = []
        for option in options if isinstance(options, list) else []:
            if isinstance(option, dict):
                name = text(option.get("name") or option.get("id"))
                shown.append(f"{name}: {text(option.get('currentValue'))}")
        if shown:
            self._quiet_entry("config", "Settings: " + ", ".join(shown), ts)

    def _usage_update(self, update: dict[str, Any]) -> None:
        """The context window now (for the turn's usage) and the session's cost so far."""
        size = update.get("size")
        if isinstance(size, int) and size > 0:
            self._context_window = size
        cost = obj(update.get("cost"))
        amount = cost.get("amount")
        if isinstance(amount, int | float) and text(cost.get("currency")).upper() in ("USD", ""):
            self._cost = float(amount)

    # --- a loaded session's history -----------------------------------------------------------

    def _replayed(self, kind: str, update: dict[str, Any], ts: datetime | None) -> None:
        """One update of the history an agent replays on ``session/load``: into the history entry."""
        piece = ""
        if kind in _HISTORY_ROLES:
            content = obj(update.get("content"))
            chunk = text(content.get("text")) if content.get("type", "text") == "text" else ""
            if not chunk:
                return
            role = _HISTORY_ROLES[kind]
            piece = chunk if role == self._history_role else f"\n\n**{role}:** {chunk}"
            self._history_role = role
        elif kind in ("tool_call", "tool_call_update"):
            tool_id = text(update.get("toolCallId"))
            title = text(update.get("title"))
            if tool_id in self._history_tools or not title:
                return
            self._history_tools.add(tool_id)
            piece, self._history_role = f"\n\n- tool: {title}", ""
        if not piece:
            return  # thoughts and plans of the past are not shown again
        if self._history is None or self._history not in self.log:
            self._history = self._system("Earlier conversation, replayed by the agent:", ts, history=True)
        self.log.append_text(self._history, piece)

    # --- tool calls ---------------------------------------------------------------------------

    def _tool_call(
        self, call: dict[str, Any], ts: datetime | None, asking: ApprovalInfo | None = None
    ) -> None:
        """A ``tool_call`` or ``tool_call_update`` (or the call a permission request shows, with
        ``asking``, the question: the call waits for it, in the one update this line makes)."""
        self._open = None
        tool_id = text(call.get("toolCallId"))
        raw = self._raw_input.setdefault(tool_id, {})
        raw.update(obj(call.get("rawInput")))
        index = self._tools.get(tool_id)
        if index is None and self._todo_list(tool_id, call, raw, ts):
            return
        previous = self.log.tool(index) if index is not None else None
        progress = self._terminals.link(tool_id, call) or shows_progress(call)
        status = advance(
            previous.status if previous else None, _STATUS.get(text(call.get("status"))), progress=progress
        )
        if previous is not None and previous.status not in OPEN_STATUSES:
            # Done: a late update (Droid announces an interrupted call again, as a bare "Tool
            # call") rewrites nothing, it may only bring the output that was missing.
            action, name = previous.action, previous.tool_name
        else:
            action = _action(call, raw, previous)
            name = (
                text(obj(call.get("_meta")).get("toolName"))
                or (previous.tool_name if previous else "")
                or _name(call)
            )
        if status not in ("denied", "timed_out", "cancelled"):
            action = self._command_output(tool_id, action, call, previous)
        output = content_text(call.get("content"))
        result = None
        if status in ("success", "failed") and (
            output is not None or previous is None or previous.result is None
        ):
            success = status == "success"
            result = tool_result(success, output if success else None, None if success else output)
        if asking is not None:
            status = advance(status, "pending_approval", progress=True)  # (never back)
        if index is None:
            # (built directly: every value here is one this normalizer made or checked)
            tool = build(
                ToolUseEntry,
                tool_name=name,
                action=action,
                status=status,
                result=result,
                approval=asking,
                tool_call_id=tool_id,
            )
            self._tools[tool_id] = self.log.add(tool_use(tool), describe(action, self._cwd), ts)
            self._note_shaped(tool_id, action)
            return
        changes: dict[str, Any] = {"status": status, "tool_name": name}
        if result is not None:
            changes["result"] = result
        if asking is not None:
            changes["approval"] = asking
        if self._shaped.get(tool_id) == (action, self._cwd, self.log.work_dir):
            # The action (and so the content) the entry already has, shaped: not shaped again
            # (Gemini repeats a call's whole diff, locations and title in every update of it).
            self.log.update_tool(index, **changes)
            return
        self.log.update_tool(index, content=describe(action, self._cwd), action=action, **changes)
        self._note_shaped(tool_id, action)

    def _note_shaped(self, tool_id: str, action: ActionType) -> None:
        """Remember the action just given to the log for ``tool_id``, as this normalizer made it,
        if the log reshapes it (paths made relative): an update that makes the same one again,
        for the same directories, then leaves the entry's as it is."""
        if type(action) in _SHAPED:
            self._shaped[tool_id] = (action, self._cwd, self.log.work_dir)
        else:
            self._shaped.pop(tool_id, None)

    def _command_output(
        self, tool_id: str, action: ActionType, call: dict[str, Any], previous: ToolUseEntry | None
    ) -> ActionType:
        """``action`` with the command's result: what our terminal saw, if it ran in one (the
        agent's own words then are about it, not its output: "Error: Tool execution cancelled by
        user"), else what this update gives when the command is done, else what an earlier update
        gave (an update need not repeat it)."""
        if not isinstance(action, CommandRun):
            return action
        result = action.result
        if result is None and self._terminals.ran(tool_id):
            result = self._terminals.result(tool_id)
        elif result is None and text(call.get("status")) in ("completed", "failed"):
            result = command_result(call)
        if result is None and previous is not None and isinstance(previous.action, CommandRun):
            result = previous.action.result
        return action if result is None else evolve(action, result=result)

    def _terminal_answer(self, request_id: Any, result: Any) -> None:
        """Our answer to the agent's ``terminal/*`` request: output or an exit code for its call."""
        tool_id = self._terminals.answered(request_id, result)
        index = self._tools.get(tool_id) if tool_id else None
        tool = self.log.tool(index) if index is not None and index in self.log else None
        if tool is None or index is None or not isinstance(tool.action, CommandRun):
            return
        if tool.status in ("denied", "timed_out"):
            return
        output = self._terminals.result(tool_id)
        if output is not None and output != tool.action.result:
            # (output seen is a command running, even if no update has said so yet)
            status = advance(tool.status, "running", progress=bool(output.stdout))
            self.log.update_tool(index, action=evolve(tool.action, result=output), status=status)
            self._shaped.pop(tool_id, None)

    def _agent_request(
        self, request_id: Any, method: str, params: dict[str, Any], ts: datetime | None
    ) -> None:
        if method == "session/request_permission":
            call = obj(params.get("toolCall"))
            options = params.get("options") or []
            # The call (Gemini announces some only here) and the question it waits for, in one
            # update.  Options that cannot be read fail below, once the call is shown, as ever.
            asking = (
                build(
                    ApprovalInfo,
                    request_id=str(request_id),
                    decision="pending",
                    reason=None,
                    for_session=False,
                )
                if isinstance(options, list | dict | str)
                else None
            )
            self._tool_call({**call, "status": None}, ts, asking)
            tool_id = text(call.get("toolCallId"))
            kinds = {text(o.get("optionId")): text(o.get("kind")) for o in options if isinstance(o, dict)}
            if tool_id not in self._tools:
                return  # a todo list asking permission: the plan shows it, the answer changes nothing
            self._permissions[request_id] = (tool_id, kinds)
            self._permission_ids[str(request_id)] = request_id
        elif method == "elicitation/create":
            question = text(params.get("message")) or "The agent asks for input"
            target = text(params.get("url"))
            shown = f"The agent asks: {question}" + (f" ({target})" if target else "")
            self._elicitations[request_id] = (self._system(shown, ts, elicitation=params.get("mode")), shown)
        elif method.startswith("terminal/"):
            self._terminals.asked(request_id, method, params)
        elif not method.startswith("fs/") and method not in _SILENT:
            self._system(f"The agent asked `{method}`, which this client does not serve", ts)

    def _permission_answer(self, request_id: Any, result: Any, error: Any) -> None:
        tool_id, kinds = self._permissions.pop(request_id, ("", {}))
        self._permission_ids.pop(str(request_id), None)
        index = self._tools.get(tool_id)
        tool = self.log.tool(index) if index is not None else None
        if tool is None or index is None:
            return
        outcome = obj(obj(result).get("outcome"))
        kind = kinds.get(text(outcome.get("optionId")), "")
        if tool.approval is not None and tool.approval.decision == "timed_out":
            return  # the run's own note said it better than the reject it then sent
        if outcome.get("outcome") == "selected" and kind.startswith("allow") and error is None:
            decision, status = "approved", "running"
        elif outcome.get("outcome") == "cancelled":
            decision, status = "cancelled", "cancelled"
        else:
            decision, status = "denied", "denied"
        approval = build(
            ApprovalInfo,
            request_id=str(request_id),
            decision=decision,
            # The person's reason (from the run's note, which comes first): ACP has no field to
            # carry it to the agent, so the entry is where it is kept.
            reason=tool.approval.reason if tool.approval is not None and decision != "approved" else None,
            for_session=kind == "allow_always",
        )
        self.log.update_tool(
            index, status=status if tool.status in OPEN_STATUSES else tool.status, approval=approval
        )

    def on_note(self, event: Note, ts: datetime | None) -> None:
        if isinstance(event, Stopped):
            self._system(event.reason or "The client stopped the agent", ts, breaks_text=False)
            return
        if not isinstance(event, Approval):
            super().on_note(event, ts)
            return
        # (by key, not by a scan of the pending ones: an agent may keep thousands pending)
        request_id = self._permission_ids.get(event.request_id)
        tool_id = self._permissions[request_id][0] if request_id in self._permissions else ""
        index = self._tools.get(tool_id)
        if index is not None and event.decision == "timed_out":
            approval = make(
                ApprovalInfo, request_id=event.request_id, decision="timed_out", reason=event.reason or None
            )
            self.log.update_tool(index, status="timed_out", approval=approval)
        elif index is not None and event.reason:
            tool = self.log.tool(index)
            if tool is not None and tool.approval is not None:
                self.log.update_tool(index, approval=evolve(tool.approval, reason=event.reason))

    # --- plans --------------------------------------------------------------------------------

    def _todo_list(
        self, tool_id: str, call: dict[str, Any], raw: dict[str, Any], ts: datetime | None
    ) -> bool:
        """A todo tool's call, shown as the plan: True when ``call`` is one (and is not a tool entry)."""
        name = text(obj(call.get("_meta")).get("toolName")) or text(call.get("title"))
        if tool_id not in self._todo_tools and name.lower() not in _TODO_TOOLS:
            return False
        self._todo_tools.add(tool_id)
        items = plan_items(raw) if isinstance(raw.get("todos"), list) else ()
        if items:
            self._open = None
            self._plan = self.log.put(self._plan, make(Plan, items=items), "Plan", ts)
        return True

    def _plan_update(self, update: dict[str, Any], ts: datetime | None) -> None:
        self._open = None
        items = tuple(
            make(
                PlanItem,
                content=text(e.get("content")),
                status=_PLAN_STATUS.get(text(e.get("status")), "pending"),
                priority=text(e.get("priority")) or None,
            )
            for e in update.get("entries") or []
            if isinstance(e, dict)
        )
        self._plan = self.log.put(self._plan, make(Plan, items=items), "Plan", ts)

    # --- our side: requests, notifications, answers -------------------------------------------

    def _client(self, msg: dict[str, Any], method: Any, has_id: bool, ts: datetime | None) -> None:
        self._saw_client = True
        if isinstance(method, str) and has_id:
            params = obj(msg.get("params"))
            self._ours[msg["id"]] = (method, params)
            if method == "session/prompt":
                self._open = None
                self._replaying = False
                prompt = "\n".join(
                    [text(b.get("text")) for b in params.get("prompt") or [] if isinstance(b, dict)]
                )
                self.log.add(USER, prompt, ts)
            elif method == "session/set_mode":
                self._system(f"Mode set to {text(params.get('modeId'))}", ts)
            elif method in ("session/new", "session/load", "session/resume"):
                self._cwd = text(params.get("cwd")) or self._cwd
                self.agent_cwd(self._cwd)
                # What a loaded session replays, until our next prompt, is history (Gemini 0.61.0
                # goes on replaying after its answer to the load).
                self._replaying = method == "session/load"
            elif method in ("session/set_config_option", "session/set_model"):
                value = text(params.get("value") or params.get("modelId"))
                self._system(f"Set {text(params.get('configId')) or 'model'} to {value}", ts)
        elif method == "session/cancel":
            self._system("Interrupt requested", ts)
        elif has_id and msg["id"] in self._permissions:
            self._permission_answer(msg["id"], msg.get("result"), msg.get("error"))
        elif has_id and msg["id"] in self._terminals:
            self._terminal_answer(msg["id"], msg.get("result"))
        elif has_id and msg["id"] in self._elicitations:
            index, shown = self._elicitations.pop(msg["id"])
            action = text(obj(msg.get("result")).get("action"))
            if index in self.log:
                self.log.replace(index, content=f"{shown}: {_ELICITATION_ANSWERS.get(action, 'refused')}")

    def _response(self, request_id: Any, result: Any, error: Any, ts: datetime | None) -> None:
        sent = self._ours.pop(request_id, None)
        if sent is not None:
            method, params = sent
        elif not self._saw_client and (guessed := _answered_method(result)) is not None:
            # A capture of stdout alone has none of our requests: the answer says what it answers
            # (a turn's stop reason and usage above all).
            method, params = guessed, {}
        else:
            self.unknown_response(request_id, result, error, ts)
            return
        if error is not None:
            if method == "session/load":
                self._replaying = False
            if method in ("session/close", "session/list"):
                return  # optional: an agent that cannot is no news (the process ends regardless)
            self._request_failed(method, obj(error) or {"message": text(error)}, ts)
            return
        res = obj(result)
        match method:  # (the one answer of every turn first)
            case "session/prompt":
                self._turn_end(res, ts)
            case "initialize":
                info = obj(res.get("agentInfo"))
                name = text(info.get("title") or info.get("name")) or "the agent"
                self._open = None
                self.log.add(
                    SYSTEM,
                    f"Connected to {name} {text(info.get('version'))}".rstrip(),
                    ts,
                    capabilities=res.get("agentCapabilities"),
                    auth_methods=[m.get("id") for m in res.get("authMethods") or [] if isinstance(m, dict)],
                )
            case "session/new" | "session/load" | "session/resume":
                self._session_opened(method, res, params, ts)

    def _session_opened(
        self, method: str, res: dict[str, Any], params: dict[str, Any], ts: datetime | None
    ) -> None:
        self._history_role = ""  # (a message replayed after the answer to a load is a new one)
        self.log.session_id = text(res.get("sessionId") or params.get("sessionId")) or self.log.session_id
        self.log.model = text(obj(res.get("models")).get("currentModelId")) or self.log.model
        mode = text(obj(res.get("modes")).get("currentModeId"))
        verb = "started" if method == "session/new" else "loaded" if method == "session/load" else "resumed"
        model = self.log.model
        shown = [f"mode {mode}"] if mode else []
        if model:
            shown.append(f"model {model}")
        details = f" ({', '.join(shown)})" if shown else ""
        self._open = None
        self.log.add(SYSTEM, f"Session `{self.log.session_id}` {verb}{details}", ts, cwd=self._cwd)

    def _turn_end(self, res: dict[str, Any], ts: datetime | None) -> None:
        self._open = None
        stop = text(res.get("stopReason"))
        status = "interrupted" if stop == "cancelled" else "failed" if stop == "refusal" else "completed"
        self.turn_statuses.append(status)
        usage = self._turn_usage(res)
        if self._context_window is not None or self._cost is not None:
            cost = None if self._cost is None else max(self._cost - self._cost_billed, 0.0)
            self._cost_billed = self._cost if self._cost is not None else self._cost_billed
            usage = evolve(
                usage,
                context_window=usage.context_window or self._context_window,
                total_cost_usd=usage.total_cost_usd if usage.total_cost_usd is not None else cost,
            )
        self.log.add(usage_entry(usage), "", ts, stop_reason=stop)
        self._usage = {}
        if stop == "cancelled":
            self.log.error("The turn was interrupted", "interrupted", ts)
            self.log.close_open_tools("cancelled")
        elif stop == "refusal":
            self.log.error("The agent refused to continue", "agent_error", ts)
        elif stop in ("max_tokens", "max_turn_requests"):
            self._system(f"The turn stopped early: {stop}", ts)

    def _turn_usage(self, res: dict[str, Any]) -> TokenUsage:
        # Gemini's, in _meta.quota.token_count (obj's and count's checks inline: once a turn, but
        # a turn of Gemini's captures is a dozen lines)
        meta = res.get("_meta")
        quota = meta.get("quota") if isinstance(meta, dict) else None
        tokens = quota.get("token_count") if isinstance(quota, dict) else None
        if isinstance(tokens, dict) and tokens:
            sent, got = tokens.get("input_tokens"), tokens.get("output_tokens")
            return turn_usage(
                sent if type(sent) is int else count(sent), got if type(got) is int else count(got), 0, 0
            )
        usage = obj(res.get("usage"))  # the protocol's own field, where agents send it
        if usage:
            return turn_usage(
                count(usage.get("inputTokens")),
                count(usage.get("outputTokens")),
                count(usage.get("cachedReadTokens")),
                count(usage.get("cachedWriteTokens")),
            )
        u = self._usage  # Qwen, summed over the turn's model calls (ints: see _chunk)
        return turn_usage(u.get("inputTokens", 0), u.get("outputTokens", 0), u.get("cachedReadTokens", 0), 0)

    def _request_failed(self, method: str, error: dict[str, Any], ts: datetime | None) -> None:
        message = text(obj(error.get("data")).get("details")) or text(error.get("message")) or "error"
        lowered = message.lower()
        if method in ("session/new", "authenticate") and ("auth" in lowered or "api key" in lowered):
            code = "auth_required"
        elif method in ("session/load", "session/resume"):
            code = "resume_failed"
        elif method == "session/prompt":
            code = "api_error"
            self.turn_statuses.append("failed")
            self.log.close_open_tools("cancelled")
        else:
            code = "protocol_error"
        self._open = None
        self.log.error(f"{method or 'request'} failed: {message}", code, ts, rpc_error=error)

    def close(self, ts: datetime | None) -> None:
        self.log.close_open_tools("cancelled")


def _answered_method(result: Any) -> str | None:
    """Which of our requests ``result`` answers, from its shape alone (for a stdout capture)."""
    res = obj(result)
    if "stopReason" in res:
        return "session/prompt"
    if "protocolVersion" in res or "agentCapabilities" in res:
        return "initialize"
    if isinstance(res.get("sessionId"), str):
        return "session/new"
    return None


# --- tool calls as actions -------------------------------------------------------------------


def _command_names(commands: Any) -> list[str]:
    """The names of the commands an agent lists: the ``name`` of each object in the list (as a
    string), objects only.  (Gemini lists twenty in every session: when each is an object with a
    string name, they are read in C, by ``map``, with no Python step per command.)"""
    if type(commands) is list:
        try:
            names = list(map(_NAME, commands))  # (KeyError, TypeError: not that shape)
        except (KeyError, TypeError):
            pass
        else:
            if all(map(_IS_STR, names)):
                return names
    return [text(c.get("name")) for c in commands if isinstance(c, dict)]


def _name(call: dict[str, Any]) -> str:
    tool_id = text(call.get("toolCallId"))
    if "__" in tool_id:  # Gemini: "run_shell_command__run_shell_command_<ms>_<n>"
        return tool_id.split("__", 1)[0]
    return text(call.get("kind")) or "tool"


def _path(call: dict[str, Any], raw: dict[str, Any], previous: ToolUseEntry | None = None) -> str:
    """The file a call works on: from its ``locations``, its raw input, the path of its diff
    content, or else what an earlier update of the same call said (an update need not repeat it)."""
    for location in call.get("locations") or []:
        if isinstance(location, dict) and location.get("path"):
            return text(location["path"])
    for key in ("file_path", "absolute_path", "path", "filePath"):
        if raw.get(key):
            return text(raw[key])
    for item in call.get("content") or []:
        if isinstance(item, dict) and item.get("type") == "diff" and item.get("path"):
            return text(item["path"])
    before = previous.action if previous is not None else None
    if isinstance(before, FileRead | FileEdit):
        return before.path
    if isinstance(before, Search):
        return before.path or ""
    return ""


def _diffs(call: dict[str, Any]) -> list[FileChange]:
    out = []
    for item in call.get("content") or []:
        if isinstance(item, dict) and item.get("type") == "diff":
            path, old, new = text(item.get("path")), item.get("oldText"), text(item.get("newText"))
            kind = text(obj(item.get("_meta")).get("kind"))
            # Gemini marks a new file with _meta.kind "add"; Qwen sends oldText "" (or none).
            created = not old or kind == "add"
            out.append(
                build(
                    FileChange,
                    type="create" if created else "delete" if kind == "delete" else "edit",
                    unified_diff=diff_texts(path, text(old), new, created=created),
                )
            )
    return out


def _action(call: dict[str, Any], raw: dict[str, Any], previous: ToolUseEntry | None) -> ActionType:
    kind = text(call.get("kind")) or (_previous_kind(previous) if previous else "")
    title = text(call.get("title"))
    match kind:
        case "execute":
            command = _command(raw.get("command")) or (title if title and title != "Shell" else "")
            if not command and previous is not None and isinstance(previous.action, CommandRun):
                command = previous.action.command
            return command_run(command)
        case "read":
            return build(FileRead, kind="file_read", path=_path(call, raw, previous))
        case "edit" | "delete":
            changes = _diffs(call)
            path = _path(call, raw, previous)
            if not changes and previous is not None and isinstance(previous.action, FileEdit):
                changes = list(previous.action.changes)
            if kind == "delete" and not changes:
                changes = [make(FileChange, type="delete")]
            return build(FileEdit, kind="file_edit", path=path, changes=tuple(changes))
        case "search":
            return make(
                Search,
                query=text(raw.get("pattern") or raw.get("query")) or title,
                path=_path(call, raw, previous) or None,
            )
        case "fetch":
            return make(WebFetch, url=text(raw.get("url")) or title, prompt=text(raw.get("prompt")) or None)
    if previous is not None and not call.get("kind"):
        return previous.action
    return make(
        GenericTool,
        tool_name=text(obj(call.get("_meta")).get("toolName")) or title or kind or "tool",
        args=raw or None,
    )


def _command(value: Any) -> str:
    """A command as a string: codex-acp gives the argv Codex runs (``["/bin/bash", "-lc", cmd]``),
    which is shown as the command the model asked for."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return display_command(shlex.join(value))
    return text(value)


def _previous_kind(tool: ToolUseEntry) -> str:
    return {
        "command_run": "execute",
        "file_read": "read",
        "file_edit": "edit",
        "search": "search",
        "web_fetch": "fetch",
    }.get(tool.action.kind, "")
