"""The Gemini API (``/v1beta/models/M:streamGenerateContent?alt=sse`` and ``:generateContent``), as
Gemini CLI uses it (protocols/acp-gemini-qwen.md §6).

Requests that ask for JSON (the model router's complexity classifier) are side requests: they get
an object filled from their schema and take no scenario step.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ..scenario import Step
from .anthropic import words
from .schema_fill import fill_schema
from .sse import Responder

__all__ = ["is_main_request", "reply", "side_reply"]

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
USAGE = {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120}


def _json_schema(body: dict[str, Any]) -> Any:
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if schema or config.get("responseMimeType") == "application/json":
        return schema or {"type": "object"}
    return None


def is_main_request(body: dict[str, Any]) -> bool:
    return _json_schema(body) is None


def side_reply(out: Responder, body: dict[str, Any], stream: bool) -> None:
    text = orjson.dumps(fill_schema(_json_schema(body))).decode()
    _send(out, [{"text": text}], stream, delay=0.0)


def reply(out: Responder, body: dict[str, Any], step: Step, stream: bool) -> None:
    if step.error is not None:
        status = int(step.error["status"])
        message = str(step.error.get("message") or f"scripted error {status}")
        out.json(
            status, {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}}
        )
        return
    parts: list[dict[str, Any]] = []
    if step.thinking:
        parts.append({"text": f"**Thinking**\n{step.thinking}", "thought": True})
    text = step.render_text(_last_function_response(body.get("contents") or []))
    if text:
        parts += [{"text": piece} for piece in words(text)]
    parts += [{"functionCall": {"name": call.name, "args": call.input}} for call in step.tools]
    _send(out, parts, stream, step.delay)


def _send(out: Responder, parts: list[dict[str, Any]], stream: bool, delay: float) -> None:
    if not stream:
        out.json(200, _response(_merge(parts), "STOP"))
        return
    out.start_sse()
    for i, part in enumerate(parts or [{"text": ""}]):
        last = i == len(parts) - 1 or not parts
        out.event(None, _response([part], "STOP" if last else None))
        if delay:
            time.sleep(delay)
    out.end_sse()


def _merge(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Text pieces joined back into one part, for a non-streamed answer."""
    merged: list[dict[str, Any]] = []
    for part in parts:
        if merged and set(part) == {"text"} and set(merged[-1]) == {"text"}:
            merged[-1] = {"text": merged[-1]["text"] + part["text"]}
        else:
            merged.append(dict(part))
    return merged


def _response(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    response: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-scripted"}
    if finish:
        candidate["finishReason"] = finish
        response["usageMetadata"] = USAGE
    return response


def _last_function_response(contents: list[Any]) -> str | None:
    if not contents or not isinstance(contents[-1], dict):
        return None
    results = [
        p["functionResponse"].get("response")
        for p in contents[-1].get("parts") or []
        if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)
    ]
    if not results:
        return None
    texts = []
    for result in results:
        output = result.get("output") if isinstance(result, dict) else None
        error = result.get("error") if isinstance(result, dict) else None
        texts.append(
            str(output)
            if output is not None
            else f"ERROR {error}"
            if error
            else orjson.dumps(result).decode()
        )
    return "; ".join(texts)
