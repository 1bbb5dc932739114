"""The OpenAI Responses API (``POST /v1/responses``, SSE), as Codex uses it (protocols/codex.md §2).

A scenario tool call becomes the item the request's ``tools`` ask for: a ``custom`` tool (Codex's
``apply_patch``) gets a ``custom_tool_call`` whose input is the step's ``input["input"]`` string,
``web_search`` a ``web_search_call``, anything else a ``function_call`` with JSON arguments.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ..scenario import Step, ToolCall
from .anthropic import words
from .sse import Responder

__all__ = ["last_tool_output", "reply"]

_OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")
USAGE = {
    "input_tokens": 100,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 20,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 120,
}


def reply(out: Responder, body: dict[str, Any], step: Step) -> None:
    if step.error is not None:
        status = int(step.error["status"])
        message = str(step.error.get("message") or f"scripted error {status}")
        out.json(
            status, {"error": {"message": message, "type": str(step.error.get("type") or "server_error")}}
        )
        return
    rid = out.new_id("resp_scripted_")
    model = body.get("model") or "gpt-scripted"
    seq = iter(range(1 << 30))
    stream = body.get("stream", True) is not False
    finished: list[dict[str, Any]] = []

    def send(name: str, data: dict[str, Any]) -> None:
        if stream:
            out.event(name, {"type": name, "sequence_number": next(seq), **data})
        elif name == "response.output_item.done":  # not streamed: only the finished items matter
            finished.append(data["item"])

    if stream:
        out.start_sse()
    send(
        "response.created",
        {
            "response": {
                "id": rid,
                "object": "response",
                "status": "in_progress",
                "model": model,
                "output": [],
            }
        },
    )
    index = 0
    if step.thinking:
        _reasoning(out, send, index, step.thinking)
        index += 1
    text = step.render_text(last_tool_output(body.get("input") or []))
    if text:
        _message(out, send, index, text, step.delay)
        index += 1
    kinds = _tool_kinds(body)
    for call in step.tools:
        _tool_call(out, send, index, call, kinds.get(call.name, "function"))
        index += 1
    if not stream:
        out.json(
            200,
            {
                "id": rid,
                "object": "response",
                "status": "completed",
                "model": model,
                "output": finished,
                "usage": USAGE,
            },
        )
        return
    send(
        "response.completed",
        {
            "response": {
                "id": rid,
                "object": "response",
                "status": "completed",
                "model": model,
                "output": [],
                "usage": USAGE,
            }
        },
    )
    out.end_sse()


def _message(out: Responder, send: Any, index: int, text: str, delay: float) -> None:
    mid = out.new_id("msg_scripted_")
    item = {"type": "message", "id": mid, "role": "assistant", "status": "in_progress", "content": []}
    send("response.output_item.added", {"output_index": index, "item": item})
    part = {"item_id": mid, "output_index": index, "content_index": 0}
    send(
        "response.content_part.added",
        {**part, "part": {"type": "output_text", "text": "", "annotations": []}},
    )
    for piece in words(text):
        send("response.output_text.delta", {**part, "delta": piece})
        if delay:
            time.sleep(delay)
    send("response.output_text.done", {**part, "text": text})
    done = {
        **item,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    send("response.output_item.done", {"output_index": index, "item": done})


def _reasoning(out: Responder, send: Any, index: int, text: str) -> None:
    rid = out.new_id("rs_scripted_")
    send(
        "response.output_item.added",
        {"output_index": index, "item": {"type": "reasoning", "id": rid, "summary": []}},
    )
    part = {"item_id": rid, "output_index": index, "summary_index": 0}
    send("response.reasoning_summary_part.added", {**part, "part": {"type": "summary_text", "text": ""}})
    for piece in words(text):
        send("response.reasoning_summary_text.delta", {**part, "delta": piece})
    send("response.reasoning_summary_text.done", {**part, "text": text})
    item = {
        "type": "reasoning",
        "id": rid,
        "summary": [{"type": "summary_text", "text": text}],
        "encrypted_content": None,
    }
    send("response.output_item.done", {"output_index": index, "item": item})


def _tool_call(out: Responder, send: Any, index: int, call: ToolCall, kind: str) -> None:
    suffix = out.new_id("")
    if call.name == "web_search":
        item = {
            "type": "web_search_call",
            "id": f"ws_{suffix}",
            "status": "completed",
            "action": {"type": "search", "query": str(call.input.get("query", ""))},
        }
        send("response.output_item.added", {"output_index": index, "item": {**item, "status": "in_progress"}})
        send("response.output_item.done", {"output_index": index, "item": item})
        return
    if kind == "custom":
        item = {
            "type": "custom_tool_call",
            "id": f"ctc_{suffix}",
            "call_id": f"call_{suffix}",
            "name": call.name,
            "input": str(call.input.get("input", "")),
        }
        delta_event, field = "response.custom_tool_call_input.delta", "input"
    else:
        item = {
            "type": "function_call",
            "id": f"fc_{suffix}",
            "call_id": f"call_{suffix}",
            "name": call.name,
            "arguments": orjson.dumps(call.input).decode(),
        }
        delta_event, field = "response.function_call_arguments.delta", "arguments"
    send(
        "response.output_item.added",
        {"output_index": index, "item": {**item, field: "", "status": "in_progress"}},
    )
    send(delta_event, {"item_id": item["id"], "output_index": index, "delta": item[field]})
    send("response.output_item.done", {"output_index": index, "item": {**item, "status": "completed"}})


def _tool_kinds(body: dict[str, Any]) -> dict[str, str]:
    kinds = {}
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            name = tool.get("name") or tool.get("type")
            kinds[str(name)] = str(tool.get("type"))
    return kinds


def last_tool_output(items: list[Any]) -> str | None:
    """The outputs of the tool calls answered since the last user message, as text."""
    outputs: list[str] = []
    for item in reversed(items):
        if not isinstance(item, dict):
            continue
        if item.get("type") in _OUTPUT_TYPES:
            outputs.append(_output_text(item.get("output")))
        elif item.get("type") == "message" and item.get("role") == "user":
            break
    return "; ".join(reversed(outputs)) if outputs else None


def _output_text(output: Any) -> str:
    if isinstance(output, list):
        output = "\n".join(str(p.get("text", "")) for p in output if isinstance(p, dict))
    text = str(output or "")
    # exec_command output comes wrapped ("Chunk ID: ..\nWall time: ..\nOutput:\n<text>"): keep the text.
    return text.split("Output:\n", 1)[1].strip() if "Output:\n" in text else text
