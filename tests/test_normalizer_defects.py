"""The classes of defect that replaying recordings made by others showed (issue 14 point 4), each
pinned by a unit test on the normalizer that had it."""

from __future__ import annotations

from typing import Any

import orjson

from orchestrate.entries import ErrorEntry, FileEdit, FileRead, GenericTool, TokenUsageEntry, ToolUse
from orchestrate.normalizers.acp import AcpNormalizer
from orchestrate.normalizers.claude_stream_json import ClaudeStreamJsonNormalizer
from orchestrate.normalizers.codex_app_server import CodexAppServerNormalizer


def lines(*objs: Any) -> bytes:
    return b"".join(orjson.dumps(o) + b"\n" for o in objs)


def kinds(entries: list[Any]) -> list[str]:
    return [e.type.kind for e in entries]


# --- ACP: a capture of stdout alone -------------------------------------------------------------


def _update(update: str, **fields: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s", "update": {"sessionUpdate": update, **fields}},
    }


def _say(text: str) -> dict[str, Any]:
    return _update("agent_message_chunk", content={"type": "text", "text": text})


def test_acp_stdout_capture_keeps_turn_ends_usage_and_boundaries() -> None:
    n = AcpNormalizer()
    n.feed(
        lines(
            {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1, "agentCapabilities": {}}},
            {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "sess-1"}},
            _say("First "),
            _say("answer."),
            {
                "jsonrpc": "2.0",
                "id": 2,
                "result": {"stopReason": "end_turn", "usage": {"inputTokens": 7, "outputTokens": 3}},
            },
            _say("Second answer."),
            {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "cancelled"}},
        )
    )
    n.finish()
    texts = [e.content for e in n.entries if e.type.kind == "assistant_message"]
    assert texts == ["First answer.", "Second answer."]  # two turns, never one merged text
    usage = [e.type.usage for e in n.entries if isinstance(e.type, TokenUsageEntry)]
    assert [(u.input_tokens, u.output_tokens) for u in usage] == [(7, 3), (0, 0)]
    assert n.turn_statuses == ["completed", "interrupted"] and n.outcome == "interrupted"
    assert n.log.session_id == "sess-1"
    assert not [
        e for e in n.entries if isinstance(e.type, ErrorEntry) and e.type.error.code == "protocol_error"
    ]


def test_acp_answer_to_no_request_of_ours_in_a_two_way_log_stays_a_protocol_error() -> None:
    n = AcpNormalizer()
    n.feed(lines({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w"}}), "stdin")
    n.feed(lines({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}))
    n.feed(lines({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}}))  # answered twice
    n.finish()
    assert n.turn_statuses == []
    assert [e.type.error.code for e in n.entries if isinstance(e.type, ErrorEntry)] == ["protocol_error"]


# --- ACP: a path given only in locations or in the diff ------------------------------------------


def test_acp_tool_path_from_locations_or_diff_content_survives_updates() -> None:
    n = AcpNormalizer()
    n.feed(
        lines(
            _update(
                "tool_call", toolCallId="r", kind="read", status="pending", locations=[{"path": "/w/a.txt"}]
            ),
            _update("tool_call_update", toolCallId="r", status="completed"),
            _update(
                "tool_call",
                toolCallId="e",
                kind="edit",
                status="pending",
                content=[{"type": "diff", "path": "/w/b.txt", "oldText": "x\n", "newText": "y\n"}],
            ),
            _update("tool_call_update", toolCallId="e", kind="edit", status="completed"),
        )
    )
    n.finish()
    tools = [e.type.tool for e in n.entries if isinstance(e.type, ToolUse)]
    assert isinstance(tools[0].action, FileRead) and tools[0].action.path == "/w/a.txt"
    assert isinstance(tools[1].action, FileEdit) and tools[1].action.path == "/w/b.txt"
    assert [t.status for t in tools] == ["success", "success"]


# --- Claude: context window, is_error with a status, a signature-only thinking block -------------


def _claude(*objs: Any) -> ClaudeStreamJsonNormalizer:
    n = ClaudeStreamJsonNormalizer()
    n.feed(lines(*objs))
    n.finish()
    return n


def _init(model: str) -> dict[str, Any]:
    return {"type": "system", "subtype": "init", "session_id": "s", "model": model, "cwd": "/w"}


def _result(**fields: Any) -> dict[str, Any]:
    return {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "",
        "session_id": "s",
        **fields,
    }


def test_claude_context_window_is_the_session_models_not_the_first_listed() -> None:
    side = {"inputTokens": 900, "outputTokens": 20, "contextWindow": 200000}
    main = {"inputTokens": 10, "outputTokens": 5, "contextWindow": 1000000}
    n = _claude(
        _init("claude-sonnet-4-5"),
        _result(modelUsage={"claude-haiku-4-5-20251001": side, "claude-sonnet-4-5-20250929": main}),
        _result(modelUsage={"claude-haiku-4-5": side, "claude-sonnet-4-5": main}),
    )
    windows = [e.type.usage.context_window for e in n.entries if isinstance(e.type, TokenUsageEntry)]
    assert windows == [1000000, 1000000]
    # No session model known: the model that did most of the work, not the first listed.
    alone = _claude(
        _result(modelUsage={"side": {**side, "inputTokens": 1}, "main": {**main, "inputTokens": 5000}})
    )
    assert [e.type.usage.context_window for e in alone.entries if isinstance(e.type, TokenUsageEntry)] == [
        1000000
    ]


def test_claude_is_error_with_an_api_status_is_a_failed_turn_with_its_status() -> None:
    n = _claude(_init("m"), _result(is_error=True, api_error_status=529))
    errors = [e for e in n.entries if isinstance(e.type, ErrorEntry)]
    assert n.outcome == "failed"
    assert [(e.type.error.code, e.type.error.message) for e in errors] == [("api_error", "API error 529")]  # type: ignore[union-attr]
    assert errors[0].metadata is not None and errors[0].metadata.extra == {"apiErrorStatus": 529}
    assert "success" not in errors[0].content


def _thinking_block(thinking: str, signature: str = "sig") -> dict[str, Any]:
    return {
        "type": "assistant",
        "message": {
            "id": "m1",
            "role": "assistant",
            "model": "m",
            "content": [{"type": "thinking", "thinking": thinking, "signature": signature}],
        },
    }


def test_claude_signature_only_thinking_is_not_an_empty_entry() -> None:
    assert kinds(_claude(_thinking_block("")).entries) == []
    assert [e.content for e in _claude(_thinking_block("ponder")).entries] == ["ponder"]

    # Streamed: the entry comes with the first thinking text, and never for a signature alone.
    def event(ev: dict[str, Any]) -> dict[str, Any]:
        return {"type": "stream_event", "event": ev}

    streamed = _claude(
        event({"type": "message_start", "message": {"id": "m1"}}),
        event(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}
        ),
        event(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "s"},
            }
        ),
        event({"type": "content_block_stop", "index": 0}),
        _thinking_block(""),
        event(
            {"type": "content_block_start", "index": 1, "content_block": {"type": "thinking", "thinking": ""}}
        ),
        event(
            {"type": "content_block_delta", "index": 1, "delta": {"type": "thinking_delta", "thinking": "a"}}
        ),
        event(
            {"type": "content_block_delta", "index": 1, "delta": {"type": "thinking_delta", "thinking": "b"}}
        ),
        event({"type": "content_block_stop", "index": 1}),
    )
    assert [(e.type.kind, e.content) for e in streamed.entries] == [("thinking", "ab")]


# --- Codex app-server: dynamic tool calls ----------------------------------------------------


def test_codex_dynamic_tool_calls_keep_their_name_and_output() -> None:
    def item(method: str, **fields: Any) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "method": method,
            "params": {"item": {"id": "d1", "type": "dynamicToolCall", **fields}},
        }

    n = CodexAppServerNormalizer()
    n.feed(
        lines(
            item("item/started", tool="lookup", namespace="board", arguments={"q": "x"}, status="inProgress"),
            item(
                "item/completed",
                tool="lookup",
                namespace="board",
                arguments={"q": "x"},
                status="completed",
                success=True,
                contentItems=[{"type": "inputText", "text": "found"}, {"type": "inputText", "text": "it"}],
            ),
        )
    )
    n.finish()
    (tool,) = [e.type.tool for e in n.entries if isinstance(e.type, ToolUse)]
    assert tool.tool_name == "board/lookup" and tool.status == "success"
    assert isinstance(tool.action, GenericTool) and tool.action.tool_name == "board/lookup"
    assert tool.action.args == {"q": "x"} and tool.action.result == "found\nit"
    assert tool.result is not None and tool.result.data == "found\nit"

    failed = CodexAppServerNormalizer()
    failed.feed(
        lines(
            item(
                "item/completed",
                tool="lookup",
                arguments={},
                status="failed",
                success=False,
                contentItems=[{"type": "inputText", "text": "no such row"}],
            )
        )
    )
    failed.finish()
    (bad,) = [e.type.tool for e in failed.entries if isinstance(e.type, ToolUse)]
    assert bad.tool_name == "lookup" and bad.status == "failed"
    assert bad.result is not None and bad.result.error == "no such row"
