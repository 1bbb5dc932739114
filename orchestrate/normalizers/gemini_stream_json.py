"""Gemini CLI's headless ``gemini -p ... --output-format stream-json`` -> unified entries (0.61.0).

Events (protocols/acp-gemini-qwen.md §7): ``init`` (session, model); ``message`` (the user's prompt
whole; the answer as ``delta: true`` pieces); ``tool_use`` (``tool_name``, ``tool_id``,
``parameters``); ``tool_result`` (``status`` success or error, ``output`` or ``error``); ``result``
(``status``, ``stats`` with the tokens, or ``error``), which ends the turn.  Thoughts are not sent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..wire.lines import WireLine
from .compiled import mypyc_attr
from .jsonl_tools import JsonlToolNormalizer
from .kinds import SYSTEM, USER
from .values import count, obj, text

__all__ = ["GeminiStreamJsonNormalizer"]


@mypyc_attr(allow_interpreted_subclasses=True)
class GeminiStreamJsonNormalizer(JsonlToolNormalizer):
    def __init__(self, max_line_bytes: int | None = None) -> None:
        super().__init__(max_line_bytes)
        self._message = 0  # the answer's pieces go into one entry until a tool call breaks it
        self._names: dict[str, str] = {}

    def feed_line(self, wire: WireLine) -> None:
        stream, ts = wire.stream, wire.ts
        if stream != "stdout":
            return  # TERM and ripgrep warnings
        event = wire.object
        if event is None:
            self.not_json("gemini", wire.text, ts)
            return
        match event.get("type"):
            case "init":
                self.log.session_id = text(event.get("session_id")) or self.log.session_id
                self.log.model = text(event.get("model")) or self.log.model
                self.log.add(SYSTEM, f"Gemini session `{self.log.session_id}` started", ts)
            case "message" if event.get("role") == "user":
                self.log.add(USER, text(event.get("content")), ts)
            case "message":
                key = f"answer-{self._message}"
                if event.get("delta"):
                    self.text_delta(key, text(event.get("content")), ts)
                else:
                    self.text_whole(key, text(event.get("content")), ts)
            case "tool_use":
                self._message += 1
                call_id, name = text(event.get("tool_id")), text(event.get("tool_name"))
                self._names[call_id] = name
                self.tool(call_id, name, obj(event.get("parameters")), "running", ts)
            case "tool_result":
                self._tool_result(event, ts)
            case "result":
                self._result(event, ts)
            case "error":
                self.log.error(text(event.get("message")) or "error", "api_error", ts, raw=event)
            case other:
                self.log.add(SYSTEM, f"`{text(other) or 'unknown'}` event", ts, raw=event)

    def _tool_result(self, event: dict[str, Any], ts: datetime | None) -> None:
        call_id = text(event.get("tool_id"))
        failed = text(event.get("status")) != "success"
        error = obj(event.get("error"))
        output = text(event.get("output")) or None
        message = text(error.get("message")) or (output if failed else None)
        name = self._names.get(call_id) or "tool"
        self.tool(call_id, name, {}, "failed" if failed else "success", ts, output=output, error=message)

    def _result(self, event: dict[str, Any], ts: datetime | None) -> None:
        stats = obj(event.get("stats"))
        self.add_usage(
            input_tokens=count(stats.get("input_tokens")),
            output_tokens=count(stats.get("output_tokens")),
            cache_read_tokens=count(stats.get("cached")),
        )
        if text(event.get("status")) == "success":
            self.end_turn("completed", ts)
            return
        error = obj(event.get("error"))
        self.log.error(text(error.get("message")) or "the run failed", "api_error", ts, raw=error)
        self.end_turn("failed", ts)
