"""Cursor's ``cursor-agent -p --output-format stream-json`` JSONL -> unified entries.

Built from the documented format (protocols/cursor.md): the CLI cannot be installed here, so
fixtures/bin/fake_cursor.py reproduces it.  Tolerant by design: an unknown event is a generic entry,
an unknown tool kind or shape a generic tool.

The one hard part is assistant text under ``--stream-partial-output``: the same text comes as small
deltas and again as cumulative copies (with or without ``model_call_id`` / ``timestamp_ms``), so
adding every event up doubles it.  Consecutive assistant events build one entry: a copy equal to
the text so far is dropped, one that extends it replaces it, a repeated tail without a timestamp
is dropped, and anything else is a delta to append.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

import orjson

from ..entries import (
    NO_EXIT_CODE,
    ActionType,
    FileChange,
    FileEdit,
    FileRead,
    FileWrite,
    GenericTool,
    Plan,
    PlanItem,
    PlanStatus,
    Search,
)
from ..wire.framing import DEFAULT_MAX_LINE_BYTES
from ..wire.lines import WireLine
from ..wire.notes import Note, RunError
from .actions import describe
from .base import DEFAULT_WINDOW, SHARED_NOTES, LineNormalizer, Stream
from .built import command_result, command_run, tool_call, tool_result, tool_use, turn_usage, usage_entry
from .compiled import mypyc_attr
from .diffs import diff_texts
from .evolve import make
from .kinds import ASSISTANT, SYSTEM, THINKING, USER
from .values import count, obj, text

__all__ = ["CursorNormalizer"]

_AUTH_MARK = "Authentication required"
_MODEL_MARK = "Cannot use this model"
_TODO_STATUS: dict[str, PlanStatus] = {
    "TODO_STATUS_PENDING": "pending",
    "TODO_STATUS_IN_PROGRESS": "in_progress",
    "TODO_STATUS_COMPLETED": "completed",
    "TODO_STATUS_CANCELLED": "cancelled",
}


@mypyc_attr(allow_interpreted_subclasses=True)
class CursorNormalizer(LineNormalizer):
    # Scalars start at the class's value (a normalizer is made per run, and a one-shot run is a
    # few lines: every attribute set in __init__ is paid per run).
    _open: tuple[str, int] | None = None  # (kind, entry index) of the text streaming in
    _plan: int | None = None
    _cwd: str | None = None
    _events = 0
    _exit_reported = False

    def __init__(self, max_line_bytes: int | None = None) -> None:
        super().__init__(max_line_bytes or DEFAULT_MAX_LINE_BYTES)
        self._tools: dict[str, int] = {}
        # call id -> what a started call's action was built from, when nothing else went into it
        self._started: dict[str, tuple[str, bytes, str | None, str | None]] = {}

    def bound(self, window: int = DEFAULT_WINDOW) -> None:
        super().bound(window)
        # (only a bounded log sweeps its tables: tracked when bound)
        self.log.track(self._tools)
        self.log.track(self._started, lambda _: False)  # (a bounded log drops them all: a shortcut)

    # --- dispatch -----------------------------------------------------------------------------

    # stdin is the prompt, which the CLI echoes as a `user` event: not even framed
    framed: ClassVar[frozenset[Stream]] = frozenset(("stdout", "stderr"))

    def feed_line(self, wire: WireLine) -> None:
        if wire.stream != "stdout":
            # stderr only says this (stdin is not framed, see framed)
            if _AUTH_MARK in wire.text:
                self.log.error(wire.text.strip(), "auth_required", wire.ts)
            return
        event, ts = wire.object, wire.ts
        if event is None:
            line = wire.text
            if line.startswith(_MODEL_MARK):
                self.log.error(line.strip(), "setup_required", ts, content=line)
            else:
                self.not_json("cursor-agent", line, ts)
            return
        self._events += 1
        session = event.get("session_id")
        if session is not None and session != self.log.session_id:  # (every line repeats it)
            self.log.session_id = text(session) or self.log.session_id
        # The most frequent first; compared with ==, not looked up: a type of the wrong kind, a
        # list, is unhashable.
        kind = event.get("type")
        if kind == "assistant":
            self._assistant(event, ts)
        elif kind == "tool_call":
            self._open = None  # (_close_text)
            self._tool_call(event, ts)
        elif kind == "thinking":
            self._thinking(event, ts)
        elif kind == "user":
            self._close_text()
            self.log.add(USER, _message_text(event), ts)
        elif kind == "system":
            self._system(event, ts)
        elif kind == "result":
            self._result(event, ts)
        else:
            self._close_text()
            self.log.add(SYSTEM, f"`{text(kind) or 'unknown'}` event", ts, raw=event)

    def _system(self, event: dict[str, Any], ts: datetime | None) -> None:
        self._close_text()
        # The session id of `system` is not trusted (VK takes it from later events): it is not used here.
        self.log.model = text(event.get("model")) or self.log.model
        self._cwd = text(event.get("cwd")) or self._cwd
        self.agent_cwd(self._cwd)
        self.log.add(
            SYSTEM,
            f"Cursor agent started with model `{self.log.model}`",
            ts,
            cwd=self._cwd,
            permission_mode=event.get("permissionMode"),
            api_key_source=event.get("apiKeySource"),
        )

    # --- text -----------------------------------------------------------------------------------

    def _assistant(self, event: dict[str, Any], ts: datetime | None) -> None:
        piece = _message_text(event)
        if self._open is None or self._open[0] != "assistant":
            self._close_text()
            self._open = ("assistant", self.log.add(ASSISTANT, piece, ts))
            return
        index = self._open[1]
        so_far = self.log.streamed(index)
        if so_far.equals(piece):
            return  # a cumulative copy of what is there
        if len(so_far) and so_far.is_prefix_of(piece):
            self.log.replace(index, content=piece)  # a cumulative copy that goes further
        elif so_far.endswith(piece) and "timestamp_ms" not in event:
            return  # a repeated tail, not a delta (deltas carry their timestamp)
        else:
            self.log.append_text(index, piece)

    def _thinking(self, event: dict[str, Any], ts: datetime | None) -> None:
        piece = text(event.get("text"))
        if event.get("subtype") == "completed":
            if self._open is not None and self._open[0] == "thinking":
                index = self._open[1]
                if piece and not self.log.streamed(index).equals(piece):
                    self.log.replace(index, content=piece)
            self._close_text()
            return
        if self._open is None or self._open[0] != "thinking":
            self._close_text()
            self._open = ("thinking", self.log.add(THINKING, piece, ts))
            return
        self.log.append_text(self._open[1], piece)

    def _close_text(self) -> None:
        self._open = None

    # --- tools --------------------------------------------------------------------------------

    def _tool_call(self, event: dict[str, Any], ts: datetime | None) -> None:
        call_id = text(event.get("call_id") or event.get("toolCallId"))
        kind, body = _tool_kind(obj(event.get("tool_call")))
        args = obj(body.get("args"))
        if kind == "updateTodosToolCall":
            self._todos(args, ts)
            return
        result = obj(body.get("result"))
        index = self._tools.get(call_id)
        completed = event.get("subtype") == "completed"
        if index is None:
            action, name, by_args = _action(kind, args, result)
            tool = tool_call(name, action, "running", None, call_id or None)
            index = self._tools[call_id] = self.log.add(tool_use(tool), describe(action, self._cwd), ts)
            if not completed:
                if by_args:  # its completion, with the same arguments, will have the same action
                    self._started[call_id] = self._made_of(kind, args)
                return  # (built as it is now: nothing to change)
            self._started.pop(call_id, None)
        else:
            made_of = self._started.get(call_id)
            if made_of is not None and made_of == self._made_of(kind, args):
                # The same arguments as it started with, read in the same directory: the entry's
                # action and description (shaped already) are what they would be built into again.
                if completed:
                    del self._started[call_id]
                    self._complete(index, None, result)
                else:
                    self.log.update_tool(index)  # (a repeated start: the entry again, as before)
                return
            self._started.pop(call_id, None)
            action = _action(kind, args, result)[0]
        if not completed:
            self.log.update_tool(index, action=action)
            return
        self._complete(index, action, result)

    def _made_of(self, kind: str, args: dict[str, Any]) -> tuple[str, bytes, str | None, str | None]:
        """What an action built from ``args`` alone depends on: the arguments as JSON (exact:
        ``1``, ``1.0`` and ``true`` are equal in Python, not here) and the directories the action
        and its description are made relative to."""
        return kind, orjson.dumps(args), self._cwd, self.log.work_dir

    def _complete(self, index: int, action: ActionType | None, result: dict[str, Any]) -> None:
        """The call at ``index`` completed with ``result``; ``action`` None: its action is unchanged."""
        failure = obj(result.get("failure"))
        success = "failure" not in result
        detail = obj(result.get("success")) if success else failure
        message = text(detail.get("stderr") or detail.get("error") or detail.get("message")) or None
        outcome = tool_result(
            success,
            detail or None if success else None,
            None if success else message or orjson.dumps(failure).decode(),
        )
        status = "success" if success else "failed"
        if action is None:
            self.log.update_tool(index, status=status, result=outcome)
        else:
            self.log.update_tool(
                index, action=action, status=status, result=outcome, content=describe(action, self._cwd)
            )

    def _todos(self, args: dict[str, Any], ts: datetime | None) -> None:
        items = tuple(
            make(
                PlanItem,
                content=text(t.get("content")),
                status=_TODO_STATUS.get(text(t.get("status")), "pending"),
            )
            for t in args.get("todos") or []
            if isinstance(t, dict)
        )
        self._plan = self.log.put(self._plan, make(Plan, items=items), "Plan", ts)

    # --- the end ------------------------------------------------------------------------------

    def _result(self, event: dict[str, Any], ts: datetime | None) -> None:
        self._close_text()
        usage = obj(event.get("usage"))
        self.log.add(
            usage_entry(
                turn_usage(
                    count(usage.get("inputTokens")),
                    count(usage.get("outputTokens")),
                    count(usage.get("cacheReadTokens")),
                    count(usage.get("cacheWriteTokens")),
                )
            ),
            "",
            ts,
            duration_ms=event.get("duration_ms"),
            usage_reported=bool(usage),
        )
        failed = bool(event.get("is_error")) or text(event.get("subtype")) not in ("", "success")
        self.turn_statuses.append("failed" if failed else "completed")
        if failed:
            self.log.error(text(event.get("result")) or "the turn failed", "agent_error", ts)
        self.log.close_open_tools("cancelled")

    notes_read: ClassVar[frozenset[str] | None] = SHARED_NOTES

    def on_note(self, event: Note, ts: datetime | None) -> None:
        if isinstance(event, RunError) and event.code == "process_exited":
            self._exit_reported = True
        super().on_note(event, ts)

    def close(self, ts: datetime | None) -> None:
        if self._events and not self.turn_statuses:
            # cursor-agent can exit on an error without a result line (protocols/cursor.md); a live
            # run has said so already, with the exit code, a plain capture has not.
            if not self._exit_reported:
                self.log.error("cursor-agent's stream ended without a result", "process_exited", ts)
            self.turn_statuses.append("failed")
        self.log.close_open_tools("cancelled")


def _message_text(event: dict[str, Any]) -> str:
    content = obj(event.get("message")).get("content")
    if isinstance(content, str):
        return content
    if type(content) is list and len(content) == 1:  # (the usual: one text block, no join)
        block = content[0]
        if isinstance(block, dict) and block.get("type") == "text":
            return text(block.get("text"))
    return "".join(
        text(b.get("text")) for b in content or [] if isinstance(b, dict) and b.get("type") == "text"
    )


def _tool_kind(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The tool kind and its body, from ``{"<kind>ToolCall": {...}}`` or ``{"tool": {"case", "value"}}``."""
    oneof = obj(payload.get("tool"))
    if "case" in oneof:
        return text(oneof.get("case")), obj(oneof.get("value"))
    for key, value in payload.items():
        if key.endswith("ToolCall") and isinstance(value, dict):
            return key, value
    key = next(iter(payload), "unknown")
    return key, obj(payload.get(key))


def _action(kind: str, args: dict[str, Any], result: dict[str, Any]) -> tuple[ActionType, str, bool]:
    """The call's action and tool name, and whether they come from ``args`` alone (``result``
    not read)."""
    path = text(args.get("path"))
    detail = obj(result.get("success")) or obj(result.get("failure")) or result
    match kind:
        case "shellToolCall":
            if not result:
                return command_run(text(args.get("command"))), "shell", False
            exit_code = detail.get("exitCode")
            outcome = command_result(
                int(exit_code) if isinstance(exit_code, int) else NO_EXIT_CODE,  # (True is 1)
                text(detail.get("stdout")) or None,
                text(detail.get("stderr")) or None,
            )
            return command_run(text(args.get("command")), outcome), "shell", False
        case "readToolCall":
            return make(FileRead, path=path), "read", True
        case "lsToolCall":
            return make(FileRead, path=path), "ls", True
        case "writeToolCall":
            content = text(args.get("fileText") or args.get("contents") or args.get("content"))
            diff = diff_texts(path, "", content, created=True)
            return (
                make(FileWrite, path=path, changes=(make(FileChange, type="create", unified_diff=diff),)),
                "write",
                True,
            )
        case "editToolCall":
            changes, by_args = _edit_changes(path, args, detail)
            return make(FileEdit, path=path, changes=changes), "edit", by_args
        case "deleteToolCall":
            return make(FileEdit, path=path, changes=(make(FileChange, type="delete"),)), "delete", True
        case "globToolCall":
            return (
                make(
                    Search,
                    query=text(args.get("globPattern")),
                    path=text(args.get("targetDirectory")) or None,
                ),
                "glob",
                True,
            )
        case "grepToolCall":
            return make(Search, query=text(args.get("pattern")), path=path or None), "grep", True
        case "semSearchToolCall":
            dirs = args.get("targetDirectories") or []
            return (
                make(Search, query=text(args.get("query")), path=", ".join(map(str, dirs)) or None),
                "semSearch",
                True,
            )
        case "mcpToolCall":
            name = (
                f"mcp:{text(args.get('providerIdentifier'))}:{text(args.get('toolName') or args.get('name'))}"
            )
            return (
                make(GenericTool, tool_name=name, args=args.get("args"), result=result or None),
                name,
                False,
            )
    name = kind.removesuffix("ToolCall") or "tool"
    return make(GenericTool, tool_name=name, args=args or None, result=result or None), name, False


def _edit_changes(
    path: str, args: dict[str, Any], detail: dict[str, Any]
) -> tuple[tuple[FileChange, ...], bool]:
    """The edit's diff from whichever form it came in: the patch, the old/new strings, else the
    result's ``diffString``; and whether it came from the arguments."""
    patch = text(obj(args.get("applyPatch")).get("patchContent"))
    if patch:
        return (make(FileChange, type="edit", unified_diff=patch),), True
    replace = obj(args.get("strReplace"))
    if replace:
        return (
            make(
                FileChange,
                type="edit",
                unified_diff=diff_texts(path, text(replace.get("oldText")), text(replace.get("newText"))),
            ),
        ), True
    edits = [e for e in obj(args.get("multiStrReplace")).get("edits") or [] if isinstance(e, dict)]
    if edits:
        return tuple(
            make(
                FileChange,
                type="edit",
                unified_diff=diff_texts(path, text(e.get("oldText")), text(e.get("newText"))),
            )
            for e in edits
        ), True
    diff = text(detail.get("diffString"))
    return (make(FileChange, type="edit", unified_diff=diff or None),), False
