"""Factory Droid's ``droid exec -o stream-json`` JSONL -> unified entries (0.225.2).

Events (protocols/more-agents.md §4): ``system/init`` (session, model, tools); ``message`` (user
or assistant, whole text); ``tool_call`` (``toolName``, ``parameters``); ``tool_result``
(``isError``, ``value``: a command's output ends with "[Process exited with code N]");
``completion`` (``finalText``, ``usage``): the end of the turn, even though the process lingers for
seconds after it.  Droid's ``TodoWrite`` takes its list as text, one ``[status] item`` per line.
"""

from __future__ import annotations

from datetime import datetime

from ..entries import ToolStatus
from ..wire.lines import WireLine
from .compiled import mypyc_attr
from .jsonl_tools import JsonlToolNormalizer
from .kinds import SYSTEM, USER
from .values import count, obj, text

__all__ = ["DroidNormalizer"]


@mypyc_attr(allow_interpreted_subclasses=True)
class DroidNormalizer(JsonlToolNormalizer):
    def __init__(self, max_line_bytes: int | None = None) -> None:
        super().__init__(max_line_bytes)
        self._names: dict[str, str] = {}  # call id -> tool name (a result names only its toolId)
        self._failed = False

    def feed_line(self, wire: WireLine) -> None:
        stream, ts = wire.stream, wire.ts
        if stream != "stdout":
            return
        event = wire.object
        if event is None:
            self.not_json("droid", wire.text, ts)
            return
        self.log.session_id = text(event.get("session_id")) or self.log.session_id
        match event.get("type"):
            case "system":
                self.log.model = text(event.get("model")) or self.log.model
                self._cwd = text(event.get("cwd")) or self._cwd
                self.log.add(SYSTEM, f"Droid session `{self.log.session_id}` started", ts, cwd=self._cwd)
            case "message" if event.get("role") == "user":
                self.log.add(USER, text(event.get("text")), ts)
            case "message":
                self.text_whole(text(event.get("id")), text(event.get("text")), ts)
            case "tool_call":
                call_id, name = text(event.get("id")), text(event.get("toolName") or event.get("toolId"))
                self._names[call_id] = name
                self.tool(call_id, name, obj(event.get("parameters")), "running", ts)
            case "tool_result":
                call_id = text(event.get("id"))
                name = self._names.get(call_id) or text(event.get("toolId"))
                value = text(event.get("value")) or None
                failed = bool(event.get("isError"))
                error = text(obj(event.get("error")).get("message")) or value if failed else None
                status: ToolStatus = "failed" if failed else "success"
                self.tool(call_id, name, {}, status, ts, output=value, error=error)
            case "completion":
                usage = obj(event.get("usage"))
                self.add_usage(
                    input_tokens=count(usage.get("input_tokens")),
                    output_tokens=count(usage.get("output_tokens")),
                    cache_read_tokens=count(usage.get("cache_read_input_tokens")),
                    cache_write_tokens=count(usage.get("cache_creation_input_tokens")),
                )
                self.end_turn("failed" if self._failed else "completed", ts, turns=event.get("numTurns"))
                self._failed = False
            case "error":
                # (an agent-loop error, then the CLI's own "Exec failed": one failed turn, ended by
                # the completion if one comes, else by the end of the output)
                message = text(event.get("message")) or "error"
                self.log.error(message, "api_error", ts, source=event.get("source"))
                self._failed = True
            case other:
                self.log.add(SYSTEM, f"`{text(other) or 'unknown'}` event", ts, raw=event)

    def close(self, ts: datetime | None) -> None:
        if self._failed:
            self.end_turn("failed", ts)
        self.log.close_open_tools("cancelled")
