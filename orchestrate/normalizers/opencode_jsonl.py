"""OpenCode's ``opencode run --format json`` JSONL -> unified entries (opencode-ai 1.18.33).

Events (protocols/more-agents.md §1): ``step_start``; ``text`` and ``reasoning`` parts, each whole
(no token deltas; a part sent again replaces itself); ``tool_use`` with the call's state (input,
output, ``metadata.exit``, an error); ``step_finish`` with the step's tokens and cost, its reason
``tool-calls`` while the model goes on, anything else at the end of the turn; ``error``.  A
permission ``run`` auto-rejects is a tool that ends with the error "The user rejected permission
...": shown as denied.  A run whose last step ended on tool calls (after such a rejection) is a
turn that ended there.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..entries import ToolStatus
from ..wire.lines import WireLine
from .compiled import mypyc_attr
from .jsonl_tools import JsonlToolNormalizer
from .kinds import SYSTEM
from .values import count, obj, text

__all__ = ["OpenCodeRunNormalizer"]

_REJECTED = "rejected permission"
_STATUS: dict[str, ToolStatus] = {
    "pending": "created",
    "running": "running",
    "completed": "success",
    "error": "failed",
}


@mypyc_attr(allow_interpreted_subclasses=True)
class OpenCodeRunNormalizer(JsonlToolNormalizer):
    def __init__(self, max_line_bytes: int | None = None) -> None:
        super().__init__(max_line_bytes)
        self._started = False
        self._steps_open = False  # steps finished since the last turn ended

    def feed_line(self, wire: WireLine) -> None:
        stream, ts = wire.stream, wire.ts
        if stream != "stdout":
            return  # stderr repeats the auto-rejections the tool entries show
        event = wire.object
        if event is None:
            self.not_json("opencode", wire.text, ts)
            return
        self.log.session_id = text(event.get("sessionID")) or self.log.session_id
        part = obj(event.get("part"))
        match event.get("type"):
            case "step_start":
                if not self._started:
                    self._started = True
                    self.log.add(SYSTEM, f"OpenCode session `{self.log.session_id}` started", ts)
            case "text":
                self.text_whole(text(part.get("id")), text(part.get("text")), ts)
            case "reasoning":
                self.text_whole(text(part.get("id")), text(part.get("text")), ts, thinking=True)
            case "tool_use":
                self._tool(part, ts)
            case "step_finish":
                self._step_finished(part, ts)
            case "error":
                error = obj(event.get("error"))
                message = text(obj(error.get("data")).get("message")) or text(error.get("name")) or "error"
                self.log.error(message, "api_error", ts, raw=error)
                self.end_turn("failed", ts)
                self._steps_open = False
            case other:
                self.log.add(SYSTEM, f"`{text(other) or 'unknown'}` event", ts, raw=event)

    def _tool(self, part: dict[str, Any], ts: datetime | None) -> None:
        state = obj(part.get("state"))
        status = _STATUS.get(text(state.get("status")), "running")
        error = text(state.get("error")) or None
        if status == "failed" and error and _REJECTED in error:
            status = "denied"
        exit_code = obj(state.get("metadata")).get("exit")
        self.tool(
            text(part.get("callID") or part.get("id")),
            text(part.get("tool")) or "tool",
            obj(state.get("input")),
            status,
            ts,
            output=text(state.get("output")) or None,
            error=error,
            exit_code=exit_code if isinstance(exit_code, int) else None,
        )

    def _step_finished(self, part: dict[str, Any], ts: datetime | None) -> None:
        tokens = obj(part.get("tokens"))
        cache = obj(tokens.get("cache"))
        self.add_usage(
            input_tokens=count(tokens.get("input")),
            output_tokens=count(tokens.get("output")),
            cache_read_tokens=count(cache.get("read")),
            cache_write_tokens=count(cache.get("write")),
            total_cost_usd=part.get("cost"),
        )
        self._steps_open = True
        if text(part.get("reason")) != "tool-calls":
            self.end_turn("completed", ts, stop_reason=text(part.get("reason")))
            self._steps_open = False

    def close(self, ts: datetime | None) -> None:
        if self._steps_open:  # the run ended on a step of tool calls (an auto-rejected permission)
            self.end_turn("completed", ts, stop_reason="tool-calls")
            self._steps_open = False
        self.log.close_open_tools("cancelled")
