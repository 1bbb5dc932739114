"""GitHub Copilot CLI's ``copilot -p ... --output-format json`` JSONL -> unified entries (1.0.102).

Each line is ``{type, data, id, timestamp, ephemeral?}`` (protocols/more-agents.md §2).  Shown:
``user.message``; ``assistant.message_delta`` (token deltas) and ``assistant.message`` (the same
message whole, with its ``toolRequests``: shown once); ``assistant.reasoning*``;
``tool.execution_start`` / ``tool.execution_complete`` (a ``denied`` error code is a refusal:
without ``--allow-all-tools`` nobody can approve); ``session.error``; the final ``result`` (its exit
code ends the turn).  The many bookkeeping events (``session.background_tasks_changed``,
``model.call_*``, ``assistant.turn_*``...) carry nothing to show.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..entries import ToolStatus
from ..wire.lines import WireLine
from .compiled import mypyc_attr
from .jsonl_tools import JsonlToolNormalizer
from .kinds import SYSTEM, USER
from .values import obj, text

__all__ = ["CopilotNormalizer"]


@mypyc_attr(allow_interpreted_subclasses=True)
class CopilotNormalizer(JsonlToolNormalizer):
    def __init__(self, max_line_bytes: int | None = None) -> None:
        super().__init__(max_line_bytes)
        self._failed = False

    def feed_line(self, wire: WireLine) -> None:
        stream, ts = wire.stream, wire.ts
        if stream != "stdout":
            return
        event = wire.object
        if event is None:
            self.not_json("copilot", wire.text, ts)
            return
        data = obj(event.get("data"))
        match event.get("type"):
            case "session.tools_updated":
                self.log.model = text(data.get("model")) or self.log.model
            case "user.message":
                self.log.add(USER, text(data.get("content")), ts)
            case "assistant.message_delta":
                self.text_delta(text(data.get("messageId")), text(data.get("deltaContent")), ts)
            case "assistant.message":
                self.text_whole(text(data.get("messageId")), text(data.get("content")), ts)
                for request in data.get("toolRequests") or []:
                    if isinstance(request, dict):
                        call_id, name = text(request.get("toolCallId")), text(request.get("name"))
                        self.tool(call_id, name, obj(request.get("arguments")), "created", ts)
            case "assistant.reasoning_delta":
                key = "reasoning:" + text(data.get("reasoningId"))
                self.text_delta(key, text(data.get("deltaContent")), ts, thinking=True)
            case "assistant.reasoning":
                key = "reasoning:" + text(data.get("reasoningId"))
                self.text_whole(key, text(data.get("content")), ts, thinking=True)
            case "tool.execution_start":
                name, args = text(data.get("toolName")), obj(data.get("arguments"))
                self.tool(text(data.get("toolCallId")), name, args, "running", ts)
            case "tool.execution_complete":
                self._tool_done(data, ts)
            case "session.error":
                self._failed = True
                message = text(data.get("message")) or "error"
                self.log.error(message, "api_error", ts, status=data.get("statusCode"))
            case "result":
                self.log.session_id = text(event.get("sessionId")) or self.log.session_id
                failed = self._failed or event.get("exitCode") not in (0, None)
                self.end_turn("failed" if failed else "completed", ts, exit_code=event.get("exitCode"))
            case "session.info" | "session.warning":
                self.log.add(SYSTEM, text(data.get("message")) or text(event.get("type")), ts)

    def _tool_done(self, data: dict[str, Any], ts: datetime | None) -> None:
        call_id = text(data.get("toolCallId"))
        result, error = obj(data.get("result")), obj(data.get("error"))
        exit_code = obj(data.get("shellExecution")).get("exitCode")
        status: ToolStatus = (
            "success" if data.get("success") else "denied" if error.get("code") == "denied" else "failed"
        )
        index = self._tools.get(call_id)
        previous = self.log.tool(index) if index is not None else None
        self.tool(
            call_id,
            previous.tool_name if previous else "tool",
            {},
            status,
            ts,
            output=text(result.get("content")) or None,
            error=text(error.get("message")) or None,
            exit_code=exit_code if isinstance(exit_code, int) else None,
        )
