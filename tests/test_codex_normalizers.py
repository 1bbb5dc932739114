"""The Codex normalizers on hand-written messages for what the recorded fixtures do not reach."""

from __future__ import annotations

from typing import Any

import orjson

from orchestrate.normalizers.codex_app_server import CodexAppServerNormalizer
from orchestrate.normalizers.codex_exec_jsonl import CodexExecNormalizer
from orchestrate.peers.jsonrpc import (
    IncomingNotification,
    IncomingRequest,
    IncomingResponse,
    JsonRpcPeer,
    MalformedMessage,
)

from .test_claude_normalizer import assert_freed_without_the_collector


def lines(*objs: Any) -> bytes:
    return b"".join(orjson.dumps(o) + b"\n" for o in objs)


def app(*objs: Any) -> CodexAppServerNormalizer:
    n = CodexAppServerNormalizer()
    n.feed(lines(*objs))
    n.finish()
    return n


def note(method: str, **params: Any) -> dict[str, Any]:
    return {"method": method, "params": params}


def test_plan_updates_replace_one_plan_per_turn() -> None:
    n = app(
        note(
            "turn/plan/updated",
            turnId="t1",
            explanation="Steps",
            plan=[{"step": "read", "status": "completed"}, {"step": "write", "status": "inProgress"}],
        ),
        note(
            "turn/plan/updated",
            turnId="t1",
            plan=[{"step": "read", "status": "completed"}, {"step": "write", "status": "completed"}],
        ),
    )
    [plan] = n.entries
    assert [(i.content, i.status) for i in plan.type.items] == [("read", "completed"), ("write", "completed")]  # type: ignore[union-attr]


def test_mcp_tool_calls_and_unknown_items_are_generic_tools() -> None:
    item = {
        "type": "mcpToolCall",
        "id": "m1",
        "server": "github",
        "tool": "create_issue",
        "arguments": {"t": 1},
        "status": "completed",
        "result": {"ok": True},
    }
    n = app(
        note("item/started", item={**item, "status": "inProgress"}),
        note("item/completed", item=item),
        note("item/completed", item={"type": "brandNew", "id": "b1", "status": "failed"}),
    )
    mcp, new = (e.type.tool for e in n.entries)  # type: ignore[union-attr]
    assert (mcp.tool_name, mcp.status, mcp.action.result) == (
        "mcp:github/create_issue",
        "success",
        {"ok": True},
    )
    assert (new.tool_name, new.status) == ("brandNew", "failed")


def test_unknown_notifications_are_kept_and_protocol_garbage_is_an_error() -> None:
    n = app(note("someday/new", x=1), {"neither": "request nor response"})
    kinds = [(e.type.kind, e.content) for e in n.entries]
    assert kinds[0] == ("system_message", "`someday/new` notification")
    assert kinds[1][0] == "error"


def test_usage_is_per_turn_not_the_running_total() -> None:
    def usage(total: int) -> dict[str, Any]:
        counts = {
            "inputTokens": total,
            "outputTokens": total // 10,
            "cachedInputTokens": 0,
            "cacheWriteInputTokens": 0,
        }
        return note(
            "thread/tokenUsage/updated", tokenUsage={"total": counts, "last": counts, "modelContextWindow": 9}
        )

    n = app(
        note("turn/started"),
        usage(100),
        usage(250),
        note("turn/completed", turn={"id": "a", "status": "completed"}),
        note("turn/started"),
        usage(400),
        note("turn/completed", turn={"id": "b", "status": "completed"}),
    )
    inputs = [e.type.usage.input_tokens for e in n.entries if e.type.kind == "token_usage"]  # type: ignore[union-attr]
    assert inputs == [250, 150]


def test_retrying_errors_and_warnings() -> None:
    n = app(
        note("error", error={"message": "Reconnecting... 1/5"}, willRetry=True),
        note("configWarning", summary="untrusted project config"),
        note("error", error={"message": "boom"}, willRetry=False),
        note("turn/completed", turn={"id": "a", "status": "failed", "error": {"message": "boom"}}),
    )
    assert [(e.type.kind, e.content) for e in n.entries if e.type.kind != "token_usage"] == [
        ("error", "Reconnecting... 1/5"),
        ("system_message", "untrusted project config"),
        ("error", "boom"),
    ]
    assert n.outcome == "failed"


def test_exec_todo_list_mcp_and_a_stream_cut_short() -> None:
    n = CodexExecNormalizer()
    n.feed(
        lines(
            {"type": "thread.started", "thread_id": "t"},
            {"type": "turn.started"},
            {
                "type": "item.started",
                "item": {"id": "i0", "type": "todo_list", "items": [{"text": "a", "completed": False}]},
            },
            {
                "type": "item.updated",
                "item": {"id": "i0", "type": "todo_list", "items": [{"text": "a", "completed": True}]},
            },
            {
                "type": "item.started",
                "item": {
                    "id": "i1",
                    "type": "mcp_tool_call",
                    "server": "s",
                    "tool": "t",
                    "arguments": {},
                    "status": "in_progress",
                },
            },
            {
                "type": "item.started",
                "item": {
                    "id": "i2",
                    "type": "command_execution",
                    "command": "bash -lc 'sleep 9'",
                    "status": "in_progress",
                },
            },
        )
    )
    n.finish()
    _, plan, mcp, command, error = n.entries
    assert [(i.content, i.status) for i in plan.type.items] == [("a", "completed")]  # type: ignore[union-attr]
    assert mcp.type.tool.tool_name == "mcp:s/t" and mcp.type.tool.status == "cancelled"  # type: ignore[union-attr]
    assert command.type.tool.action.command == "sleep 9" and command.type.tool.status == "cancelled"  # type: ignore[union-attr]
    assert error.type.error.code == "interrupted" and n.outcome == "interrupted"  # type: ignore[union-attr]


def test_exec_prompt_split_across_chunks_is_one_user_message() -> None:
    n = CodexExecNormalizer()
    data = "héllo\nwörld".encode()
    for i in range(len(data)):
        n.feed(data[i : i + 1], "stdin")
    assert [(e.type.kind, e.content) for e in n.entries] == [("user_message", "héllo\nwörld")]


def test_jsonrpc_peer_classifies_by_shape() -> None:
    peer = JsonRpcPeer(jsonrpc_field=False)
    request_id, line = peer.request("initialize", {"a": 1})
    assert orjson.loads(line) == {"id": request_id, "method": "initialize", "params": {"a": 1}}
    assert orjson.loads(JsonRpcPeer().notify("initialized")) == {"jsonrpc": "2.0", "method": "initialized"}
    # Codex: no "jsonrpc", and its own requests count from 0 in a space of their own.
    assert peer.receive_line('{"id": 0, "method": "item/x", "params": {}}') == IncomingRequest(
        0, "item/x", {}
    )
    assert peer.receive_line('{"method": "n", "params": [1]}') == IncomingNotification("n", [1])
    assert peer.receive_line(f'{{"id": {request_id}, "result": {{"ok": true}}}}') == IncomingResponse(
        request_id, "initialize", {"ok": True}
    )
    assert isinstance(
        peer.receive_line(f'{{"id": {request_id}, "result": {{}}}}'), MalformedMessage
    )  # answered twice
    assert isinstance(peer.receive_line("not json"), MalformedMessage)
    assert isinstance(peer.receive_line('{"id": true, "result": 1}'), MalformedMessage)
    error = orjson.loads(peer.respond_error(0, -32601, "method not found: x"))
    assert error == {"id": 0, "error": {"code": -32601, "message": "method not found: x"}}


def test_a_finished_app_server_normalizer_is_freed_without_the_garbage_collector() -> None:
    """As Claude's (test_claude_normalizer.py): no reference cycle unless bound."""
    assert_freed_without_the_collector("codex-app-server", CodexAppServerNormalizer, 3)
