"""``codex exec --json`` JSONL -> unified entries.

Quirks handled (codex-cli 0.169.0, fixtures/codex-exec, protocols/codex.md §3):
- ``turn.completed.usage`` is the running total of the *thread*: a turn's usage is the difference
  from the previous total in the stream.  A resumed thread's first turn has no previous total in
  its own stream; the run notes ``resumed_thread`` and that usage is marked ``cumulative``;
- ``web_search`` items carry the key ``id`` twice; like every JSON parser here we keep the last
  value, which both the started and the completed event carry, so the item stays one entry;
- after SIGINT exec prints no terminal event: a turn left open at the end was interrupted;
- the prompt is written to stdin as plain text: that is the user message.
"""

from __future__ import annotations

import codecs
from datetime import datetime
from typing import Any, ClassVar

from ..entries import (
    NO_EXIT_CODE,
    AssistantMessage,
    EntryPatch,
    FileChange,
    FileEdit,
    FileWrite,
    GenericTool,
    Plan,
    PlanItem,
    Search,
    Thinking,
    ToolStatus,
)
from ..wire.framing import DEFAULT_MAX_LINE_BYTES
from ..wire.lines import WireLine
from ..wire.notes import Cwd, Note, ResumedThread
from .actions import describe
from .base import DEFAULT_WINDOW, SHARED_NOTES, LineNormalizer, Stream
from .built import command_result, command_run, tool_call, tool_result, tool_use, turn_usage, usage_entry
from .codex_items import display_command
from .compiled import mypyc_attr
from .evolve import make
from .kinds import ASSISTANT, SYSTEM, THINKING, USER
from .values import count
from .values import obj as _dict
from .values import text as _s

__all__ = ["CodexExecNormalizer"]

# exec reports which files changed, not how: no diff to show (use app-server for diffs).  Frozen,
# so one of each is shared by every change.
_CREATE, _EDIT = FileChange(type="create"), FileChange(type="edit")
_FILE_CHANGES = {"add": _CREATE, "delete": FileChange(type="delete")}

_FINAL: dict[str, ToolStatus] = {"completed": "success", "failed": "failed", "declined": "denied"}


_Utf8Decoder = codecs.getincrementaldecoder("utf-8")


@mypyc_attr(allow_interpreted_subclasses=True)
class CodexExecNormalizer(LineNormalizer):
    # Scalars start at the class's value (a normalizer is made per run, and exec's runs are a few
    # lines each: every attribute set in __init__ is paid per run).
    _prompt_index: int | None = None
    _stdin_decoder: codecs.IncrementalDecoder | None = None  # made when a prompt is cut mid-character
    _previous_total: tuple[int, int, int, int] | None = None
    _resumed = False
    _turn_open = False
    _cwd: str | None = None
    _shown_error: str | None = None

    def __init__(self, max_line_bytes: int | None = None) -> None:
        super().__init__(max_line_bytes or DEFAULT_MAX_LINE_BYTES)
        self._items: dict[str, int] = {}
        # a started file change's item id -> the changes it started with (the action built from
        # them is the entry's: its completion with the same changes keeps it)
        self._changes: dict[str, Any] = {}

    def bound(self, window: int = DEFAULT_WINDOW) -> None:
        super().bound(window)
        # (only a bounded log sweeps its tables: tracked when bound)
        self.log.track(self._items)
        self.log.track(self._changes, lambda _: False)  # (a bounded log drops them all: a shortcut)

    # stdin is the prompt as plain text; stderr is tracing output, never protocol (a line of it
    # would show nothing): neither is framed
    framed: ClassVar[frozenset[Stream]] = frozenset(("stdout",))

    def unframed(self, chunk: bytes, stream: Stream, ts: datetime | None) -> list[EntryPatch]:
        return self._prompt(chunk, ts) if stream == "stdin" else []

    def _prompt(self, chunk: bytes, ts: datetime | None) -> list[EntryPatch]:
        """The prompt, as plain text: one user message, however it is chunked."""
        decoder = self._stdin_decoder
        if decoder is None:
            # The usual prompt is one chunk of valid UTF-8: decoded whole.  A chunk that ends inside
            # a character (or holds invalid bytes) gets the incremental decoder, which then reads
            # every later chunk: the text is what it alone would have made of all of them.
            try:
                piece = chunk.decode()
            except UnicodeDecodeError:
                decoder = self._stdin_decoder = _Utf8Decoder("replace")
                piece = decoder.decode(chunk)
        else:
            piece = decoder.decode(chunk)
        if self._prompt_index is None or self._prompt_index not in self.log:
            self._prompt_index = self.log.add(USER, piece, ts)
        else:
            self.log.append_text(self._prompt_index, piece)
        return self.log.drain()

    def feed_line(self, wire: WireLine) -> None:
        obj = wire.object  # (a stdout line: the other streams are not framed, see framed)
        if obj is None:
            self.not_json("codex exec", wire.text, wire.ts)
            return
        kind = obj.get("type")
        # (compared with ==, not looked up in a table: a type of the wrong kind, a list, is unhashable)
        if kind == "item.completed" or kind == "item.started" or kind == "item.updated":
            item = obj.get("item")
            self._item(item if isinstance(item, dict) else {}, kind == "item.completed", wire.ts)
        elif kind == "turn.started":
            self._turn_open = True
        elif kind == "thread.started":
            self.log.session_id = _s(obj.get("thread_id")) or self.log.session_id
            verb = "resumed" if self._resumed else "started"
            self.log.add(SYSTEM, f"Thread `{self.log.session_id}` {verb}", wire.ts)
        elif kind == "turn.completed":
            self._turn_end("completed", wire.ts, usage=_dict(obj.get("usage")))
        elif kind == "turn.failed":
            message = _s(_dict(obj.get("error")).get("message")) or "the turn failed"
            if message != self._shown_error:  # exec repeats the stream's error event here
                self.log.error(message, "agent_error", wire.ts)
            self._turn_end("failed", wire.ts)
        elif kind == "error":
            message = _s(obj.get("message")) or "error"
            code = "api_retry" if message.startswith("Reconnecting") else "api_error"
            self._shown_error = message
            self.log.error(message, code, wire.ts)
        else:
            self.log.add(SYSTEM, f"`{_s(kind) or 'unknown'}` event", wire.ts, raw=obj)

    notes_read: ClassVar[frozenset[str] | None] = SHARED_NOTES | {ResumedThread.kind, Cwd.kind}

    def on_note(self, event: Note, ts: datetime | None) -> None:
        if isinstance(event, ResumedThread):
            self._resumed = True
        elif isinstance(event, Cwd):
            self._cwd = event.cwd or None
            self.agent_cwd(self._cwd)
        else:
            super().on_note(event, ts)

    # --- items --------------------------------------------------------------------------------

    def _item(self, item: dict[str, Any], completed: bool, ts: datetime | None) -> None:
        item_id, kind = _s(item.get("id")), _s(item.get("type"))
        action: FileEdit | FileWrite | Search | GenericTool
        match kind:
            case "agent_message":
                self._text(item_id, ASSISTANT, _s(item.get("text")), ts)
            case "reasoning":
                self._text(item_id, THINKING, _s(item.get("text")), ts)
            case "command_execution":
                self._command(item_id, item, completed, ts)
            case "file_change":
                raw = item.get("changes")
                if item_id in self._changes:
                    if raw == self._changes[item_id] and item_id in self._items:
                        # The files it started with: the entry's action (shaped already) is what
                        # they would be built into again.
                        if completed:
                            del self._changes[item_id]
                        self._tool(item_id, "fileChange", None, completed, _s(item.get("status")), ts)
                        return
                    del self._changes[item_id]
                kinds: list[FileChange] = []
                paths: list[str] = []
                creates = True
                for c in item.get("changes") or ():  # (a plain loop: generators cost a frame each)
                    if isinstance(c, dict):
                        change = _FILE_CHANGES.get(_s(c.get("kind")), _EDIT)
                        creates = creates and change is _CREATE
                        kinds.append(change)
                        paths.append(_s(c.get("path")))
                # Built as what it is (what shape_tool would make of a file edit): a write when it
                # only creates files, else an edit.
                if kinds and creates:
                    action = make(FileWrite, path=", ".join(paths), changes=tuple(kinds))
                else:
                    action = make(FileEdit, path=", ".join(paths), changes=tuple(kinds))
                new_call = item_id not in self._items
                self._tool(item_id, "fileChange", action, completed, _s(item.get("status")), ts)
                if new_call and not completed:
                    self._changes[item_id] = raw  # (the parsed line's own list: nothing copied)
            case "web_search":
                self._tool(
                    item_id,
                    "webSearch",
                    make(Search, query=_s(item.get("query"))),
                    completed,
                    "completed",
                    ts,
                )
            case "mcp_tool_call":
                name = f"mcp:{_s(item.get('server'))}/{_s(item.get('tool'))}"
                action = make(
                    GenericTool,
                    tool_name=name,
                    args=item.get("arguments"),
                    result=item.get("result") or item.get("error"),
                )
                self._tool(item_id, name, action, completed, _s(item.get("status")), ts)
            case "todo_list":
                items = tuple(
                    make(
                        PlanItem,
                        content=_s(t.get("text")),
                        status="completed" if t.get("completed") else "pending",
                    )
                    for t in item.get("items") or []
                    if isinstance(t, dict)
                )
                self._items[item_id] = self.log.put(
                    self._items.get(item_id), make(Plan, items=items), "Plan", ts
                )
            case "error":
                self.log.error(_s(item.get("message")), "agent_warning", ts)
            case _:
                action = make(GenericTool, tool_name=kind or "unknown", args=item)
                self._tool(item_id, kind or "unknown", action, completed, _s(item.get("status")), ts)

    def _text(self, item_id: str, type_: AssistantMessage | Thinking, text: str, ts: datetime | None) -> None:
        index = self._items.get(item_id)
        if index is None:
            self._items[item_id] = self.log.add(type_, text, ts)
        else:
            self.log.replace(index, content=text)

    def _command(self, item_id: str, item: dict[str, Any], completed: bool, ts: datetime | None) -> None:
        command = display_command(_s(item.get("command")))
        status = _s(item.get("status"))
        if not completed:
            self._tool(item_id, "commandExecution", command_run(command), False, status, ts)
            return
        exit_code = item.get("exit_code")
        output = _s(item.get("aggregated_output")) or None
        result = command_result(  # (an int as pydantic would make it: True is 1)
            int(exit_code) if isinstance(exit_code, int) else NO_EXIT_CODE, output, None
        )
        if status == "completed" and exit_code not in (0, None):
            status = "failed"
        action = command_run(command, result)
        self._tool(item_id, "commandExecution", action, True, status, ts, output)

    def _tool(
        self,
        item_id: str,
        name: str,
        action: Any,
        completed: bool,
        status: str,
        ts: datetime | None,
        output: str | None = None,
    ) -> None:
        """Create or move on the call ``item_id``; ``output`` is a finished command's; ``action``
        None keeps the call's (only for a call that exists)."""
        result = None
        new: ToolStatus = "running"
        if completed:
            new = _FINAL.get(status, "success")
            result = tool_result(
                new == "success", output if new == "success" else None, output if new == "failed" else None
            )
        index = self._items.get(item_id)
        if index is None:  # a new call, built as it is now (not built, then changed)
            tool = tool_call(name, action, new, result, item_id)
            self._items[item_id] = self.log.add(tool_use(tool), describe(action, self._cwd), ts)
        else:
            if action is None:  # (the call's action as it is)
                self.log.update_tool(index, status=new, result=result)
            else:
                self.log.update_tool(index, action=action, status=new, result=result)

    def _turn_end(self, status: str, ts: datetime | None, usage: dict[str, Any] | None = None) -> None:
        self._turn_open = False
        self.turn_statuses.append(status)
        if usage:
            # (input, output, cache read, cache write): the thread's totals so far
            total = (
                count(usage.get("input_tokens")),
                count(usage.get("output_tokens")),
                count(usage.get("cached_input_tokens")),
                count(usage.get("cache_write_input_tokens")),
            )
            base = self._previous_total or (0, 0, 0, 0)
            cumulative = self._previous_total is None and self._resumed
            self._previous_total = total
            turn = turn_usage(total[0] - base[0], total[1] - base[1], total[2] - base[2], total[3] - base[3])
            entry = usage_entry(turn)
            if cumulative:
                self.log.add(entry, "", ts, cumulative=True)
            else:
                self.log.add(entry, "", ts)
        if status != "completed":
            self.log.close_open_tools("cancelled")

    def close(self, ts: datetime | None) -> None:
        if self._turn_open:  # no terminal event: exec was interrupted (SIGINT prints none)
            self.log.error("The turn ended without a result: codex exec was interrupted", "interrupted", ts)
            self._turn_end("interrupted", ts)
        self.log.close_open_tools("cancelled")
