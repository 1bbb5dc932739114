"""Claude Code's stream-json (both directions) -> unified entries.

Facts this relies on (CLI 2.1.330, see fixtures/claude-stream-json):
- each content block of one API message is its own ``assistant`` line, all sharing ``message.id``;
- with ``--include-partial-messages``, ``stream_event`` lines carry the raw SSE deltas, and a block's
  full ``assistant`` line comes *before* its ``content_block_stop``;
- ``system/init`` is repeated on every user turn;
- tool results come back as ``user`` lines with ``tool_use_result`` and ``tool_result_meta``;
- the client's own lines (user turns, control responses) are fed in as the ``stdin`` stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

import orjson

from ..entries import (
    ActionType,
    ApprovalInfo,
    ApprovalOutcome,
    GenericTool,
    Plan,
    TokenUsage,
    ToolStatus,
    ToolUse,
    ToolUseEntry,
)
from ..wire.framing import DEFAULT_MAX_LINE_BYTES
from ..wire.lines import WireLine
from ..wire.notes import Approval, Note
from .actions import describe
from .base import DEFAULT_WINDOW, OPEN_STATUSES, SHARED_NOTES, LineNormalizer
from .built import tool_call, tool_use, turn_usage, usage_entry
from .claude_tools import action_for, plan_items, result_text, tool_result_of
from .compiled import mypyc_attr
from .evolve import make
from .kinds import ASSISTANT, SYSTEM, THINKING, USER
from .values import count
from .values import obj as _dict
from .values import text as _s

__all__ = ["ClaudeStreamJsonNormalizer", "TurnResult"]

_INTERRUPT_MARK = "[Request interrupted by user"
# Lines that only steer the protocol and carry nothing to show.
_SILENT_TYPES = {"control_response", "keep_alive"}
# thinking_tokens: running estimates while a thinking block streams (2.1.330); the block itself shows.
_SILENT_SYSTEM = {"session_state_changed", "hook_started", "hook_response", "thinking_tokens"}
# (a tuple: an event type of the wrong type, say an object, is compared, never hashed)
_BLOCK_EVENTS = ("content_block_start", "content_block_delta", "content_block_stop")


@dataclass
class TurnResult:
    """What a ``result`` line said about one turn."""

    is_error: bool
    subtype: str
    terminal_reason: Any  # (the line's value as it is, of any JSON type; compiled, a narrower
    # annotation would be checked on assignment and turn a damaged field into an error of its own)
    text: str
    errors: list[str] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        return (self.terminal_reason or "").startswith("aborted")


@dataclass
class _Block:
    index: int  # entry index; -1 for blocks we do not show
    kind: str  # text | thinking | tool_use | other
    partial_json: list[str] = field(default_factory=list)
    has_full: bool = False  # the authoritative `assistant` line was seen


@mypyc_attr(allow_interpreted_subclasses=True)
class ClaudeStreamJsonNormalizer(LineNormalizer):
    """Sans-I/O: feed it stdout (and the client's stdin) bytes; it returns entry patches."""

    def __init__(self, max_line_bytes: int | None = None) -> None:
        super().__init__(max_line_bytes or DEFAULT_MAX_LINE_BYTES)
        self._blocks: dict[tuple[str, int], _Block] = {}
        self._next_block: dict[str, int] = {}
        self._open_block: dict[str, int] = {}
        self._stream_msg: dict[str | None, str] = {}
        self._tools: dict[str, int] = {}  # tool_use_id -> entry index
        self._plans: set[str] = set()  # TodoWrite ids: shown as plan entries, not tools
        self._approval_tool: dict[str, str] = {}  # control request id -> tool_use_id
        self._last_init: tuple[str | None, str | None] | None = None
        self._saw_stdin_user = False
        self._shown_api_error: str | None = None
        self.results: list[TurnResult] = []

    def bound(self, window: int = DEFAULT_WINDOW) -> None:
        super().bound(window)
        # (Only a bounded log sweeps its tables: tracked when bound.  The hooks tie the log and
        # this normalizer in a cycle, which an unbounded one, made per run, should not pay: it
        # would wait for the garbage collector instead of going when its run is dropped.)
        log = self.log
        log.track(self._tools)
        # A block still streaming stays whatever its entry (a hidden block has none).
        log.track(self._blocks, lambda block: block.index in log or not block.has_full)
        log.after_sweep(self._forget)

    def _forget(self) -> None:
        """(A bounded log dropped the blocks of released entries: the rows hanging off them go.)"""
        messages = {mid for mid, _ in self._blocks}
        for table in (self._next_block, self._open_block):
            for mid in [m for m in table if m not in messages]:
                del table[mid]
        for mid, idx in list(self._open_block.items()):
            if (mid, idx) not in self._blocks:
                del self._open_block[mid]
        for parent in [p for p in self._stream_msg if p is not None and p not in self._tools]:
            del self._stream_msg[parent]
        for request_id in [r for r, t in self._approval_tool.items() if t not in self._tools]:
            del self._approval_tool[request_id]
        del self.results[:-16]

    # --- dispatch -----------------------------------------------------------------------------

    def feed_line(self, wire: WireLine) -> None:
        _raw, _value, obj, stream, ts, _error = wire  # (one unpacking: cheaper than three reads)
        if stream != "stdout":
            # (stderr is kept in the raw log and attached to failures, never parsed as protocol)
            if stream == "stdin" and obj is not None:
                self._client_line(obj, ts)
            return
        if obj is None:
            self.not_json("The CLI", wire.text, ts)
            return
        # The agent's lines, dispatched here (a call less per line), the most frequent kinds
        # first: a match tries its cases in turn.  (The value as it is: a case compares it, and
        # one of another type matches none.)
        kind = obj.get("type")
        match kind:
            case "stream_event":
                self._stream_event(obj, ts)
            case "system":
                self._system(obj, ts)
            case "assistant":
                self._assistant(obj, ts)
            case "user":
                self._user(obj, ts)
            case "result":
                self._result(obj, ts)
            case "control_request":
                self._control_request(obj, ts)
            case "control_cancel_request":
                self._approval_update(_s(obj.get("request_id")), "cancelled", "cancelled", None)
            case _ if _s(kind) not in _SILENT_TYPES:
                self._generic(obj, ts)

    def _generic(self, obj: dict[str, Any], ts: datetime | None) -> None:
        # Unknown message types are kept, never fatal: newer CLIs add types all the time.
        label = "/".join(_s(obj.get(k)) for k in ("type", "subtype") if obj.get(k))
        self.log.add(SYSTEM, f"`{label or 'unknown'}` message", ts, raw=obj)

    # --- system and result --------------------------------------------------------------------

    def _system(self, obj: dict[str, Any], ts: datetime | None) -> None:
        sub = obj.get("subtype")
        if type(sub) is not str:
            sub = _s(sub)
        if sub in _SILENT_SYSTEM:  # (the most frequent system lines: before the cases)
            return
        match sub:
            case "init":
                self._init(obj, ts)
            case "status":
                if mode := obj.get("permissionMode"):
                    self.log.add(SYSTEM, f"Permission mode: {mode}", ts)
            case "api_retry":
                message = (
                    f"API error {obj.get('error_status')}: retrying (attempt {obj.get('attempt')} of "
                    f"{obj.get('max_retries')}) in {obj.get('retry_delay_ms')} ms"
                )
                self.log.error(message, "api_retry", ts, raw=obj)
            case "permission_denied":
                self._permission_denied(obj, ts)
            case "compact_boundary":
                self.log.add(SYSTEM, "Conversation compacted", ts)
            case _:
                self._generic(obj, ts)

    def _init(self, obj: dict[str, Any], ts: datetime | None) -> None:
        session, model = obj.get("session_id"), obj.get("model")
        self.log.session_id = _s(session) or self.log.session_id
        self.log.model = _s(model) or self.log.model
        self.agent_cwd(_s(obj.get("cwd")))
        # init is repeated on every turn; show it only when something changed.
        if (session, model) == self._last_init:
            return
        self._last_init = (session, model)
        text = f"Session `{session}` started with model `{model}`"
        self.log.add(
            SYSTEM,
            text,
            ts,
            cwd=obj.get("cwd"),
            permission_mode=obj.get("permissionMode"),
            tools=obj.get("tools"),
        )

    def _result(self, obj: dict[str, Any], ts: datetime | None) -> None:
        errors = [_s(e) for e in obj.get("errors") or []]
        turn = TurnResult(
            is_error=bool(obj.get("is_error")) or obj.get("subtype") != "success",
            subtype=_s(obj.get("subtype")),
            terminal_reason=obj.get("terminal_reason"),
            text=_s(obj.get("result")),
            errors=errors,
        )
        self.results.append(turn)
        interrupted = turn.interrupted  # (a property: read once)
        self.turn_statuses.append(
            "interrupted" if interrupted else "failed" if turn.is_error else "completed"
        )
        self.log.session_id = _s(obj.get("session_id")) or self.log.session_id
        self.log.add(
            usage_entry(_usage(obj, self.log.model)),
            "",
            ts,
            num_turns=obj.get("num_turns"),
            duration_ms=obj.get("duration_ms"),
        )
        if interrupted:
            # errors[] holds only CLI diagnostics here ("[ede_diagnostic] ..."): kept, not shown.
            message = f"The turn was interrupted ({turn.terminal_reason})"
            self.log.error(message, "interrupted", ts, errors=errors or None)
            self.log.close_open_tools("cancelled")
        elif turn.is_error:
            status = obj.get("api_error_status")
            message = "; ".join(errors) or turn.text
            if not message:  # (a subtype "success" with is_error says nothing more than its status)
                message = f"API error {status}" if status is not None else f"turn ended with {turn.subtype}"
            # An API failure is already shown by its synthetic assistant message; the result repeats it.
            if message != self._shown_api_error:
                code = "api_error" if status is not None else _error_code(turn, message)
                self.log.error(message, code, ts, api_error_status=status)
        self._shown_api_error = None

    # --- assistant blocks ---------------------------------------------------------------------

    def _assistant(self, obj: dict[str, Any], ts: datetime | None) -> None:
        msg = _dict(obj.get("message"))
        if obj.get("is_api_error_message") or msg.get("model") == "<synthetic>":
            text = "\n".join(result_text([b]) for b in msg.get("content") or [])
            code = "auth_required" if obj.get("error") == "authentication_failed" else "api_error"
            self._shown_api_error = text or "API error"
            self.log.error(self._shown_api_error, code, ts, status=obj.get("api_error_status"))
            return
        mid = msg.get("id")
        if type(mid) is not str or not mid:
            mid = _s(mid) or _s(obj.get("uuid"))
        for block in msg.get("content") or []:
            if isinstance(block, dict):
                self._full_block(mid, block, ts)

    def _full_block(self, mid: str, block: dict[str, Any], ts: datetime | None) -> None:
        # The full line belongs to the block the partial stream has open, else to the next one.
        idx = self._open_block.get(mid)
        if idx is None or self._blocks[(mid, idx)].has_full:
            idx = self._next_block.get(mid, 0)
        self._next_block[mid] = max(self._next_block.get(mid, 0), idx + 1)
        btype = block.get("type")
        if type(btype) is not str:
            btype = _s(btype)
        if btype == "tool_use":
            self._tool_block(
                mid, idx, _s(block.get("id")), _s(block.get("name")), _dict(block.get("input")), ts
            )
            return
        text = _s(block.get("text") if btype == "text" else block.get("thinking"))
        existing = self._blocks.get((mid, idx))
        if existing is None:
            self._new_text_block(mid, idx, btype, text, ts, has_full=True)
            return
        existing.has_full = True
        if existing.index < 0 and existing.kind == "thinking" and text:
            existing.index = self.log.add(THINKING, text, ts)
        elif existing.index >= 0 and not self.log.streamed(existing.index).equals(text):
            self.log.replace(existing.index, content=text)

    def _new_text_block(
        self, mid: str, idx: int, btype: str, text: str, ts: datetime | None, *, has_full: bool
    ) -> None:
        if btype == "text":
            index = self.log.add(ASSISTANT, text, ts)
        elif btype in ("thinking", "redacted_thinking"):
            # Shown once it has text: a block that carries only its signature (or is redacted) has
            # nothing to show, and an entry cannot be taken back once added.
            index, btype = (self.log.add(THINKING, text, ts), "thinking") if text else (-1, "thinking")
        else:
            index, btype = -1, "other"
        self._blocks[(mid, idx)] = _Block(index, btype, has_full=has_full)

    def _tool_block(
        self, mid: str, idx: int, tool_id: str, name: str, args: dict[str, Any] | None, ts: datetime | None
    ) -> None:
        """A tool_use block, whole (``args``: its input) or as it starts streaming (None)."""
        block = self._blocks.get((mid, idx))
        if block is not None:
            block.has_full = True
            if block.kind != "tool_use":
                block = None  # announced as text or something else: the call is shown on its own
        if name == "TodoWrite":
            self._plans.add(tool_id)
            if block is None:
                items = plan_items(args or {})
                index = self.log.add(make(Plan, items=items), "Plan", ts, tool_call_id=tool_id)
                self._blocks[(mid, idx)] = _Block(index, "tool_use", has_full=True)
            else:
                self.log.replace(block.index, type=make(Plan, items=plan_items(args or {})))
            return
        if args is None:
            action, content = _started(name)
        else:
            action = action_for(name, args)
            content = describe(action)
        if block is None:
            index = self.log.add(tool_use(tool_call(name, action, "created", None, tool_id)), content, ts)
            self._blocks[(mid, idx)] = _Block(index, "tool_use", has_full=True)
        else:
            index = block.index
            self.log.update_tool(index, content=content, action=action)
        self._tools[tool_id] = index

    # --- partial messages (--include-partial-messages) ---------------------------------------

    def _stream_event(self, obj: dict[str, Any], ts: datetime | None) -> None:
        # (Most lines of a run are these, most of them deltas: each step here is paid per line.)
        ev = obj.get("event")
        if type(ev) is not dict:
            return
        etype = ev.get("type")
        if etype == "message_start":
            parent = _s(obj.get("parent_tool_use_id")) or None
            self._stream_msg[parent] = _s(_dict(ev.get("message")).get("id"))
            return
        if etype not in _BLOCK_EVENTS:
            return  # message_delta, message_stop, ping: nothing to show (the result has the usage)
        idx = ev.get("index")
        if not isinstance(idx, int):
            return
        mid = obj.get("api_message_id")
        if type(mid) is not str:
            mid = _s(mid)
        if not mid:
            mid = self._stream_msg.get(_s(obj.get("parent_tool_use_id")) or None, "")
        if etype == "content_block_delta":
            # (A delta, the most frequent line of all, is handled here: a call less per line.)
            delta = ev.get("delta")
            if not isinstance(delta, dict):
                delta = {}
            block = self._blocks.get((mid, idx))
            if block is None or block.has_full:
                return
            dtype = delta.get("type")
            if block.index < 0:
                thought = _s(delta.get("thinking")) if dtype == "thinking_delta" else ""
                if block.kind == "thinking" and thought:  # the first text of a thinking block
                    block.index = self.log.add(THINKING, thought, ts)
                return
            if dtype == "text_delta" or dtype == "thinking_delta":
                piece = delta.get("text") if dtype == "text_delta" else delta.get("thinking")
                self.log.append_text(block.index, piece if type(piece) is str else _s(piece))
            elif dtype == "input_json_delta":
                block.partial_json.append(_s(delta.get("partial_json")))
        elif etype == "content_block_start":
            self._block_start(mid, idx, _dict(ev.get("content_block")), ts)
        else:
            self._block_stop(mid, idx)

    def _block_start(self, mid: str, idx: int, cb: dict[str, Any], ts: datetime | None) -> None:
        self._open_block[mid] = idx
        if (mid, idx) in self._blocks:
            return
        btype = _s(cb.get("type"))
        if btype == "tool_use":
            self._tool_block(mid, idx, _s(cb.get("id")), _s(cb.get("name")), None, ts)
            self._blocks[(mid, idx)].has_full = False
        else:
            self._new_text_block(
                mid, idx, btype, _s(cb.get("text") or cb.get("thinking")), ts, has_full=False
            )

    def _block_stop(self, mid: str, idx: int) -> None:
        if self._open_block.get(mid) == idx:
            del self._open_block[mid]
        block = self._blocks.get((mid, idx))
        if block is None or block.has_full or block.kind != "tool_use" or not block.partial_json:
            return
        # No full assistant line for this tool (an interrupted stream): use the streamed input.
        try:
            args = orjson.loads("".join(block.partial_json))
        except orjson.JSONDecodeError:
            return
        tool = self.log.tool(block.index)
        if isinstance(args, dict) and tool is not None:
            action = action_for(tool.tool_name, args)
            self.log.update_tool(block.index, content=describe(action), action=action)

    # --- tool results and approvals -----------------------------------------------------------

    def _user(self, obj: dict[str, Any], ts: datetime | None) -> None:
        content = _dict(obj.get("message")).get("content")
        if isinstance(content, str):
            self._user_text(content, obj, ts)
            return
        meta = {_s(m.get("id")): m for m in obj.get("tool_result_meta") or [] if isinstance(m, dict)}
        for block in content or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                self._tool_result(block, obj.get("tool_use_result"), meta, ts)
            elif block.get("type") == "text":
                self._user_text(_s(block.get("text")), obj, ts)

    def _user_text(self, text: str, obj: dict[str, Any], ts: datetime | None) -> None:
        if text.startswith(_INTERRUPT_MARK):
            self.log.add(SYSTEM, "Interrupted by user", ts)
        elif not (obj.get("isReplay") and self._saw_stdin_user):
            # (--replay-user-messages echoes a turn we already showed from stdin.)
            self.log.add(USER, text, ts)

    def _tool_result(
        self, block: dict[str, Any], extra: Any, meta: dict[str, Any], ts: datetime | None
    ) -> None:
        tool_id = _s(block.get("tool_use_id"))
        if tool_id in self._plans:
            return
        index = self._tools.get(tool_id)
        if index is None:  # a result for a call we never saw: keep it as a generic tool
            unknown = make(
                ToolUseEntry,
                tool_name="unknown",
                action=make(GenericTool, tool_name="unknown"),
                tool_call_id=tool_id,
            )
            index = self._tools[tool_id] = self.log.add(make(ToolUse, tool=unknown), "unknown tool", ts)
        tool = self.log.tool(index)
        assert tool is not None
        is_error = bool(block.get("is_error"))
        action, result = tool_result_of(tool, result_text(block.get("content")), is_error, extra)
        decision = _dict(_dict(meta.get(tool_id)).get("permission_decision"))
        status: ToolStatus = "failed" if is_error else "success"
        if tool.status in ("denied", "timed_out", "cancelled"):
            status = tool.status
        elif is_error and decision.get("decision") == "reject":
            status = "denied"
        if action is tool.action:  # (an action that did not change is not shaped again)
            self.log.update_tool(index, result=result, status=status)
        else:
            self.log.update_tool(index, action=action, result=result, status=status)

    def _permission_denied(self, obj: dict[str, Any], ts: datetime | None) -> None:
        tool_id = _s(obj.get("tool_use_id"))
        reason = _s(obj.get("message")) or "denied by the CLI's permission settings"
        approval = make(ApprovalInfo, request_id=f"config:{tool_id}", decision="denied", reason=reason)
        index = self._tools.get(tool_id)
        if index is None:
            name = _s(obj.get("tool_name")) or "unknown"
            tool = make(
                ToolUseEntry,
                tool_name=name,
                action=make(GenericTool, tool_name=name),
                tool_call_id=tool_id,
                status="denied",
                approval=approval,
            )
            self._tools[tool_id] = self.log.add(make(ToolUse, tool=tool), reason, ts)
        else:
            self.log.update_tool(index, status="denied", approval=approval)

    def _control_request(self, obj: dict[str, Any], ts: datetime | None) -> None:
        req = _dict(obj.get("request"))
        if req.get("subtype") != "can_use_tool":
            return  # the peer answers it with an error; nothing to show
        tool_id, request_id = _s(req.get("tool_use_id")), _s(obj.get("request_id"))
        self._approval_tool[request_id] = tool_id
        index = self._tools.get(tool_id)
        if index is None:  # a request for a call whose tool_use line we never saw
            name = _s(req.get("tool_name"))
            action = action_for(name, _dict(req.get("input")))
            tool = make(ToolUseEntry, tool_name=name, action=action, tool_call_id=tool_id)
            index = self._tools[tool_id] = self.log.add(make(ToolUse, tool=tool), describe(action), ts)
        self.log.update_tool(
            index, status="pending_approval", approval=make(ApprovalInfo, request_id=request_id)
        )

    def _approval_update(
        self,
        request_id: str,
        decision: ApprovalOutcome,
        status: ToolStatus,
        reason: str | None,
        for_session: bool = False,
    ) -> None:
        index = self._tools.get(self._approval_tool.get(request_id, ""))
        tool = self.log.tool(index) if index is not None else None
        if tool is None or index is None:
            return
        if tool.approval is not None and tool.approval.decision == "timed_out":
            return  # the run's own timeout note is more precise than the deny it then sent
        approval = make(
            ApprovalInfo, request_id=request_id, decision=decision, reason=reason, for_session=for_session
        )
        self.log.update_tool(
            index, status=status if tool.status in OPEN_STATUSES else tool.status, approval=approval
        )

    # (A replay's note of another kind, the agent's exit in every run, is then not read at all.)
    notes_read: ClassVar[frozenset[str] | None] = SHARED_NOTES | {Approval.kind}

    def on_note(self, event: Note, ts: datetime | None) -> None:
        if not isinstance(event, Approval):
            super().on_note(event, ts)
        elif event.decision == "timed_out":
            self._approval_update(event.request_id, "timed_out", "timed_out", event.reason or None)
        elif event.for_session:
            self._approval_update(event.request_id, "approved", "running", None, True)

    # --- the client's own lines (stdin) -------------------------------------------------------

    def _client_line(self, obj: dict[str, Any], ts: datetime | None) -> None:
        kind = obj.get("type")
        req = _dict(obj.get("request"))
        if kind == "user":
            self._saw_stdin_user = True
            self.log.add(USER, result_text(_dict(obj.get("message")).get("content")), ts)
        elif kind == "control_response":
            self._client_answer(_dict(obj.get("response")))
        elif kind == "control_request" and req.get("subtype") == "interrupt":
            self.log.add(SYSTEM, "Interrupt requested", ts)
        elif kind == "control_request" and req.get("subtype") == "set_permission_mode":
            self.log.add(SYSTEM, f"Permission mode set to {req.get('mode')}", ts)

    def _client_answer(self, resp: dict[str, Any]) -> None:
        request_id = _s(resp.get("request_id"))
        if request_id not in self._approval_tool:
            return
        body = _dict(resp.get("response"))
        if resp.get("subtype") == "error":
            self._approval_update(request_id, "denied", "denied", _s(resp.get("error")))
        elif body.get("behavior") == "allow":
            self._approval_update(request_id, "approved", "running", None)
        else:
            self._approval_update(request_id, "denied", "denied", _s(body.get("message")) or None)

    def close(self, ts: datetime | None) -> None:
        self.log.close_open_tools("cancelled")


_STARTED: dict[str, tuple[ActionType, str]] = {}
_MAX_STARTED = 64


def _started(name: str) -> tuple[ActionType, str]:
    """The action of a ``name`` call whose input has not streamed yet, and its description: the
    same for every call of one tool, so made once (the models are frozen; a generic tool's is not
    kept, its ``args`` dict is the entry's own)."""
    known = _STARTED.get(name)
    if known is None:
        action = action_for(name, {})
        known = (action, describe(action))
        if not isinstance(action, GenericTool):
            if len(_STARTED) >= _MAX_STARTED:  # (names come from the agent: the table stays small)
                _STARTED.clear()
            _STARTED[name] = known
    return known


def _usage(obj: dict[str, Any], model: str | None) -> TokenUsage:
    u = _dict(obj.get("usage"))
    cost = obj.get("total_cost_usd")
    per_model = obj.get("modelUsage")
    return turn_usage(
        count(u.get("input_tokens")),
        count(u.get("output_tokens")),
        count(u.get("cache_read_input_tokens")),
        count(u.get("cache_creation_input_tokens")),
        # (a tuple: ``int | float`` would be made on every call)
        float(cost) if isinstance(cost, (int, float)) else None,
        _context_window(per_model, model) if type(per_model) is dict and per_model else None,
    )


def _context_window(per_model: dict[str, Any], model: str | None) -> int | None:
    """The session model's context window.  ``modelUsage`` lists every model the turn used, side
    models (a small one for titles and summaries) included, in no promised order: the session's
    model by name (or a dated form of it), else the one that did most of the work."""
    windows = {
        name: m
        for name, m in per_model.items()
        if isinstance(m, dict) and isinstance(m.get("contextWindow"), int)
    }
    if not windows:
        return None
    if model:
        for name, m in windows.items():
            if name == model or name.startswith(model + "-") or model.startswith(name + "-"):
                return int(m["contextWindow"])
    busiest = max(windows.values(), key=lambda m: count(m.get("outputTokens")) + count(m.get("inputTokens")))
    return int(busiest["contextWindow"])


def _error_code(turn: TurnResult, message: str) -> str:
    if "No conversation found" in message:
        return "resume_failed"
    if turn.terminal_reason == "api_error":
        return "api_error"
    return "agent_error"
