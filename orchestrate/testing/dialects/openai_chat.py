"""OpenAI chat completions (``POST /v1/chat/completions``, SSE or not), as Qwen Code uses it
(protocols/acp-gemini-qwen.md §6).

Side requests take no scenario step: a forced single tool (``tool_choice: "required"``, Qwen's
permission classifier) gets that tool called with arguments filled from its schema, a request for a
JSON response gets a filled object, Qwen's follow-up suggestion call gets an empty answer, and a
request that offers no tools (OpenCode's title of a conversation) gets a short one.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ..scenario import Step, ToolCall
from .anthropic import words
from .schema_fill import fill_schema
from .sse import Responder

__all__ = ["is_main_request", "reply", "side_reply"]

USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
_SIDE_MARKERS = ("[SUGGESTION MODE",)


def _forced_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    tools = body.get("tools") or []
    if body.get("tool_choice") == "required" and len(tools) == 1 and isinstance(tools[0], dict):
        return dict(tools[0].get("function") or {})
    return None


def _json_schema(body: dict[str, Any]) -> Any:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return (fmt.get("json_schema") or {}).get("schema") or {"type": "object"}
    return {"type": "object"} if fmt.get("type") == "json_object" else None


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


def _suggestion(body: dict[str, Any]) -> bool:
    return _last_user_text(body.get("messages") or []).lstrip().startswith(_SIDE_MARKERS)


def is_main_request(body: dict[str, Any]) -> bool:
    # The main conversation offers the agent's tools; a request without any is a side task (OpenCode
    # asks for a title of every conversation this way: protocols/more-agents.md §1).
    if not body.get("tools") or _forced_tool(body) is not None or _json_schema(body) is not None:
        return False
    return not _suggestion(body)


def side_reply(out: Responder, body: dict[str, Any]) -> None:
    forced = _forced_tool(body)
    if forced is not None:
        call = ToolCall(str(forced.get("name")), fill_schema(forced.get("parameters") or {}) or {})
        return _send(out, body, None, None, [call], 0.0)
    schema = _json_schema(body)
    if schema is not None:
        return _send(out, body, None, orjson.dumps(fill_schema(schema)).decode(), [], 0.0)
    _send(out, body, None, "" if _suggestion(body) else "OK", [], 0.0)


def reply(out: Responder, body: dict[str, Any], step: Step) -> None:
    if step.error is not None:
        status = int(step.error["status"])
        message = str(step.error.get("message") or f"scripted error {status}")
        out.json(
            status,
            {
                "error": {
                    "message": message,
                    "type": str(step.error.get("type") or "server_error"),
                    "code": status,
                }
            },
        )
        return
    text = step.render_text(_last_tool_result(body.get("messages") or []))
    _send(out, body, step.thinking, text, list(step.tools), step.delay)


def _send(
    out: Responder,
    body: dict[str, Any],
    thinking: str | None,
    text: str | None,
    calls: list[ToolCall],
    delay: float,
) -> None:
    cid, model = out.new_id("chatcmpl-"), str(body.get("model") or "scripted")
    tool_calls: list[dict[str, Any]] = [
        {
            "id": out.new_id("call_"),
            "type": "function",
            "function": {"name": c.name, "arguments": orjson.dumps(c.input).decode()},
        }
        for c in calls
    ]
    finish = "tool_calls" if tool_calls else "stop"
    if not body.get("stream"):
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if thinking:
            message["reasoning_content"] = thinking
        if tool_calls:
            message["tool_calls"] = tool_calls
        out.json(
            200,
            {
                "id": cid,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": USAGE,
            },
        )
        return

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> None:
        out.event(
            None,
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            },
        )

    out.start_sse()
    chunk({"role": "assistant", "content": ""})
    if thinking:
        chunk({"reasoning_content": thinking})
    for piece in words(text or ""):
        chunk({"content": piece})
        if delay:
            time.sleep(delay)
    for i, call in enumerate(tool_calls):
        arguments = call["function"]["arguments"]
        chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""},
                    }
                ]
            }
        )
        chunk({"tool_calls": [{"index": i, "function": {"arguments": arguments}}]})
    chunk({}, finish)
    if (body.get("stream_options") or {}).get("include_usage"):
        out.event(
            None,
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [],
                "usage": USAGE,
            },
        )
    out.event(None, "[DONE]")
    out.end_sse()


def _last_tool_result(messages: list[Any]) -> str | None:
    results = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        results.append(_content_text(message.get("content")))
    return "; ".join(reversed(results)) if results else None


def _content_text(content: Any) -> str:
    # Qwen sends a tool result as a JSON string of content parts: [{"type": "text", "text": ...}].
    if isinstance(content, str):
        try:
            parsed = orjson.loads(content)
        except orjson.JSONDecodeError:
            return content
        if not isinstance(parsed, list):
            return content
        content = parsed
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else orjson.dumps(content).decode()
