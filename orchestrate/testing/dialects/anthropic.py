"""The Anthropic Messages API (``POST /v1/messages``), streaming and not, as Claude Code uses it."""

from __future__ import annotations

import itertools
import time
from typing import Any

import orjson

from ..scenario import Step
from .sse import Responder

__all__ = ["is_main_request", "last_tool_result", "reply"]


def is_main_request(body: dict[str, Any]) -> bool:
    """Requests of the main conversation offer tools; side requests (model checks, titles) do not."""
    return bool(body.get("tools"))


def reply(out: Responder, body: dict[str, Any], step: Step) -> None:
    if step.error is not None:
        status = int(step.error["status"])
        etype = str(step.error.get("type") or _ERROR_TYPES.get(status, "api_error"))
        text = str(step.error.get("message") or f"scripted {etype}")
        out.json(status, {"type": "error", "error": {"type": etype, "message": text}})
        return
    blocks = _blocks(out, step, last_tool_result(body.get("messages") or []))
    message: dict[str, Any] = {
        "id": out.new_id("msg_scripted_"),
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or "claude-scripted",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(body, 1),
    }
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    if not body.get("stream"):
        message.update(content=blocks, stop_reason=stop, usage=_usage(body, _out_tokens(blocks)))
        out.json(200, message)
        return
    out.start_sse()
    out.event("message_start", {"type": "message_start", "message": message})
    for i, block in enumerate(blocks):
        out.event(
            "content_block_start", {"type": "content_block_start", "index": i, "content_block": _empty(block)}
        )
        for delta in _deltas(block):
            out.event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
            if step.delay:
                time.sleep(step.delay)
        out.event("content_block_stop", {"type": "content_block_stop", "index": i})
    out.event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": _out_tokens(blocks)},
        },
    )
    out.event("message_stop", {"type": "message_stop"})
    out.end_sse()


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def _blocks(out: Responder, step: Step, tool_result: str | None) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if step.thinking:
        blocks.append({"type": "thinking", "thinking": step.thinking, "signature": "scripted"})
    text = step.render_text(tool_result)
    if text:
        blocks.append({"type": "text", "text": text})
    for call in step.tools:
        blocks.append(
            {
                "type": "tool_use",
                "id": out.new_id("toolu_scripted_"),
                "name": call.name,
                "input": call.input,
            }
        )
    return blocks


def _empty(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return {**block, "text": ""}
    if block["type"] == "thinking":
        return {**block, "thinking": "", "signature": ""}
    return {**block, "input": {}}


def _deltas(block: dict[str, Any]) -> list[dict[str, Any]]:
    if block["type"] == "tool_use":
        # Streamed in pieces as the real API does, but cut between members, never inside a string:
        # a path split across two deltas could not be scrubbed from a recorded fixture.
        js = orjson.dumps(block["input"]).decode()
        cuts = [0, *(i + 1 for i, ch in enumerate(js) if ch == "," and js[i + 1 : i + 2] == '"'), len(js)]
        return [{"type": "input_json_delta", "partial_json": js[a:b]} for a, b in itertools.pairwise(cuts)]
    key, dtype = ("text", "text_delta") if block["type"] == "text" else ("thinking", "thinking_delta")
    return [{"type": dtype, key: piece} for piece in words(block[key])]


def words(text: str) -> list[str]:
    """``text`` cut into word-sized deltas that join back to it exactly."""
    parts = text.split(" ")
    return [p for p in (w + (" " if i < len(parts) - 1 else "") for i, w in enumerate(parts)) if p]


def last_tool_result(messages: list[Any]) -> str | None:
    """The tool results the last user message carries, as text (denials are prefixed ERROR)."""
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if not isinstance(content, list):
            return None
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        return "; ".join(_result_text(r) for r in results) if results else None
    return None


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        content = "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ("ERROR " if block.get("is_error") else "") + str(content or "")


def _usage(body: dict[str, Any], output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": 100 + len(orjson.dumps(body.get("messages") or [])) // 40,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    }


def _out_tokens(blocks: list[dict[str, Any]]) -> int:
    return sum(
        20 if b["type"] == "tool_use" else max(1, len(str(b.get("text") or b.get("thinking") or "")) // 4)
        for b in blocks
    )
