"""The Claude stream-json normalizer on edge cases (the recorded fixtures are in test_golden.py)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from orchestrate.entries import NO_EXIT_CODE, TokenUsage
from orchestrate.normalizers.base import Normalizer
from orchestrate.normalizers.built import turn_usage
from orchestrate.normalizers.claude_stream_json import ClaudeStreamJsonNormalizer
from orchestrate.replay import replay

# --- edge cases, on hand-written lines ---------------------------------------------------------


def lines(*objs: Any) -> bytes:
    return b"".join((o if isinstance(o, bytes) else orjson.dumps(o)) + b"\n" for o in objs)


def normalize(data: bytes, stdin: bytes = b"") -> ClaudeStreamJsonNormalizer:
    n = ClaudeStreamJsonNormalizer()
    if stdin:
        n.feed(stdin, "stdin")
    n.feed(data)
    n.finish()
    return n


def kinds(n: ClaudeStreamJsonNormalizer) -> list[str]:
    return [e.type.kind for e in n.entries]


def test_malformed_and_non_object_lines_become_protocol_errors_and_the_stream_goes_on() -> None:
    n = normalize(
        lines(
            b"not json",
            b"[1,2]",
            {
                "type": "assistant",
                "message": {"id": "m", "content": [{"type": "text", "text": "still here"}]},
            },
        )
    )
    assert kinds(n) == ["error", "error", "assistant_message"]
    assert n.entries[0].type.error.code == "protocol_error"  # type: ignore[union-attr]
    assert n.entries[0].content == "not json"
    assert n.entries[2].content == "still here"


def test_unknown_message_types_are_kept_as_generic_entries() -> None:
    n = normalize(lines({"type": "brand_new_thing", "x": 1}, {"type": "system", "subtype": "novel", "y": 2}))
    assert kinds(n) == ["system_message", "system_message"]
    assert n.entries[0].metadata and n.entries[0].metadata.extra == {
        "raw": {"type": "brand_new_thing", "x": 1}
    }
    assert "system/novel" in n.entries[1].content


def test_over_long_line_is_an_error_entry() -> None:
    n = ClaudeStreamJsonNormalizer(max_line_bytes=100)
    n.feed(
        lines({"type": "assistant", "message": {"id": "m", "content": [{"type": "text", "text": "x" * 200}]}})
    )
    n.feed(lines({"type": "assistant", "message": {"id": "m2", "content": [{"type": "text", "text": "ok"}]}}))
    assert kinds(n) == ["error", "assistant_message"]
    assert n.entries[0].type.error.code == "line_too_long"  # type: ignore[union-attr]


def test_text_deltas_coalesce_into_one_entry_and_the_full_line_settles_it() -> None:
    ev = {"type": "stream_event", "api_message_id": "m1", "parent_tool_use_id": None}
    n = normalize(
        lines(
            {**ev, "event": {"type": "message_start", "message": {"id": "m1"}}},
            {
                **ev,
                "event": {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}},
            },
            {
                **ev,
                "event": {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": "hm"},
                },
            },
            {
                "type": "assistant",
                "message": {"id": "m1", "content": [{"type": "thinking", "thinking": "hm."}]},
            },
            {**ev, "event": {"type": "content_block_stop", "index": 0}},
            {
                **ev,
                "event": {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {"type": "text", "text": ""},
                },
            },
            {
                **ev,
                "event": {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "text_delta", "text": "Hel"},
                },
            },
            {
                **ev,
                "event": {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "text_delta", "text": "lo"},
                },
            },
            {"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": "Hello"}]}},
            {**ev, "event": {"type": "content_block_stop", "index": 1}},
        )
    )
    assert [(e.type.kind, e.content) for e in n.entries] == [
        ("thinking", "hm."),
        ("assistant_message", "Hello"),
    ]


def test_streamed_tool_input_is_used_when_no_full_line_comes() -> None:
    ev = {"type": "stream_event", "api_message_id": "m1", "parent_tool_use_id": None}
    n = normalize(
        lines(
            {
                **ev,
                "event": {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}},
                },
            },
            {
                **ev,
                "event": {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": '{"command": "l'},
                },
            },
            {
                **ev,
                "event": {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": 's"}'},
                },
            },
            {**ev, "event": {"type": "content_block_stop", "index": 0}},
        )
    )
    tool = n.entries[0].type.tool  # type: ignore[union-attr]
    assert tool.action.command == "ls"
    assert tool.status == "cancelled"  # the stream ended with the call still open


def tool_use(tool_id: str, name: str, args: dict[str, Any], mid: str = "m") -> dict[str, Any]:
    return {
        "type": "assistant",
        "message": {"id": mid, "content": [{"type": "tool_use", "id": tool_id, "name": name, "input": args}]},
    }


def tool_result(tool_id: str, content: str, is_error: bool = False, extra: Any = None) -> dict[str, Any]:
    return {
        "type": "user",
        "message": {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": tool_id, "content": content, "is_error": is_error}
            ],
        },
        "tool_use_result": extra,
    }


@pytest.mark.parametrize(
    ("name", "args", "kind"),
    [
        ("Read", {"file_path": "/w/a.py"}, "file_read"),
        ("Write", {"file_path": "/w/a.py", "content": "x\n"}, "file_write"),
        ("Edit", {"file_path": "/w/a.py", "old_string": "a", "new_string": "b"}, "file_edit"),
        (
            "MultiEdit",
            {"file_path": "/w/a.py", "edits": [{"old_string": "a", "new_string": "b"}]},
            "file_edit",
        ),
        ("Grep", {"pattern": "foo"}, "search"),
        ("Glob", {"pattern": "*.py"}, "search"),
        ("WebSearch", {"query": "anyio"}, "search"),
        ("WebFetch", {"url": "https://example.com", "prompt": "sum"}, "web_fetch"),
        ("Task", {"description": "explore", "prompt": "look", "subagent_type": "Explore"}, "task"),
        ("mcp__github__create_issue", {"title": "t"}, "tool"),
        ("SomethingNew", {"a": 1}, "tool"),
    ],
)
def test_tool_names_map_to_actions(name: str, args: dict[str, Any], kind: str) -> None:
    n = normalize(lines(tool_use("t1", name, args), tool_result("t1", "fine")))
    tool = n.entries[0].type.tool  # type: ignore[union-attr]
    assert (tool.tool_name, tool.action.kind, tool.status) == (name, kind, "success")


def test_edit_diff_and_multiedit_diffs() -> None:
    n = normalize(
        lines(
            tool_use(
                "t1",
                "MultiEdit",
                {
                    "file_path": "/w/a.txt",
                    "edits": [
                        {"old_string": "one", "new_string": "uno"},
                        {"old_string": "two", "new_string": "dos"},
                    ],
                },
            )
        )
    )
    changes = n.entries[0].type.tool.action.changes  # type: ignore[union-attr]
    assert [c.unified_diff for c in changes] == [
        "--- a/w/a.txt\n+++ b/w/a.txt\n@@ -1 +1 @@\n-one\n+uno\n",
        "--- a/w/a.txt\n+++ b/w/a.txt\n@@ -1 +1 @@\n-two\n+dos\n",
    ]


def test_edit_result_hunks_replace_the_guessed_diff() -> None:
    hunks = [{"oldStart": 3, "oldLines": 1, "newStart": 3, "newLines": 1, "lines": ["-a", "+b"]}]
    n = normalize(
        lines(
            tool_use("t1", "Edit", {"file_path": "/w/x", "old_string": "a", "new_string": "b"}),
            tool_result("t1", "ok", extra={"filePath": "/w/x", "structuredPatch": hunks}),
        )
    )
    change = n.entries[0].type.tool.action.changes[0]  # type: ignore[union-attr]
    assert change.unified_diff == "--- a/w/x\n+++ b/w/x\n@@ -3,1 +3,1 @@\n-a\n+b\n"


def test_bash_exit_code_output_and_interrupted() -> None:
    n = normalize(
        lines(
            tool_use("t1", "Bash", {"command": "make"}),
            tool_result("t1", "Exit code 2\nboom", True, "Error: Exit code 2\nboom"),
            tool_use("t2", "Bash", {"command": "ok"}, mid="m2"),
            tool_result("t2", "out", extra={"stdout": "out", "stderr": "warn", "interrupted": False}),
            tool_use("t3", "Bash", {"command": "sleep"}, mid="m3"),
            tool_result("t3", "", True, {"stdout": "", "stderr": "", "interrupted": True}),
        )
    )
    results = [e.type.tool.action.result for e in n.entries]  # type: ignore[union-attr]
    assert (results[0].exit_code, results[0].stdout) == (2, "boom")
    assert (results[1].exit_code, results[1].stdout, results[1].stderr) == (0, "out", "warn")
    assert results[2].exit_code == NO_EXIT_CODE  # interrupted: no code, and the JSON form still has one
    assert [e.type.tool.status for e in n.entries] == ["failed", "success", "failed"]  # type: ignore[union-attr]


def test_todowrite_is_a_plan() -> None:
    n = normalize(
        lines(
            tool_use(
                "t1",
                "TodoWrite",
                {"todos": [{"content": "a", "status": "completed"}, {"content": "b", "status": "weird"}]},
            ),
            tool_result("t1", "ok"),
        )
    )
    assert kinds(n) == ["plan"]
    items = n.entries[0].type.items  # type: ignore[union-attr]
    assert [(i.content, i.status) for i in items] == [("a", "completed"), ("b", "pending")]


def test_permission_denied_message_marks_the_tool_denied() -> None:
    n = normalize(
        lines(
            tool_use("t1", "Bash", {"command": "rm x"}),
            {
                "type": "system",
                "subtype": "permission_denied",
                "tool_name": "Bash",
                "tool_use_id": "t1",
                "message": "not allowed in dontAsk mode",
            },
            tool_result("t1", "denied", True),
        )
    )
    tool = n.entries[0].type.tool  # type: ignore[union-attr]
    assert tool.status == "denied" and tool.approval.reason == "not allowed in dontAsk mode"


def test_approval_flow_from_both_directions() -> None:
    request = {
        "type": "control_request",
        "request_id": "r1",
        "request": {
            "subtype": "can_use_tool",
            "tool_name": "Bash",
            "input": {"command": "x"},
            "tool_use_id": "t1",
        },
    }
    n = ClaudeStreamJsonNormalizer()
    n.feed(lines(tool_use("t1", "Bash", {"command": "x"}), request))
    assert n.entries[0].type.tool.status == "pending_approval"  # type: ignore[union-attr]
    n.feed(
        lines(
            {
                "type": "control_response",
                "response": {
                    "subtype": "success",
                    "request_id": "r1",
                    "response": {"behavior": "allow", "updatedInput": {"command": "x"}},
                },
            }
        ),
        "stdin",
    )
    tool = n.entries[0].type.tool  # type: ignore[union-attr]
    assert (tool.status, tool.approval.decision) == ("running", "approved")


def test_timed_out_approval_keeps_its_status_through_the_denial() -> None:
    request = {
        "type": "control_request",
        "request_id": "r1",
        "request": {
            "subtype": "can_use_tool",
            "tool_name": "Bash",
            "input": {"command": "x"},
            "tool_use_id": "t1",
        },
    }
    n = ClaudeStreamJsonNormalizer()
    n.feed(lines(tool_use("t1", "Bash", {"command": "x"}), request))
    n.note({"type": "approval", "request_id": "r1", "decision": "timed_out", "reason": "no answer in 1 s"})
    n.feed(
        lines(
            {
                "type": "control_response",
                "response": {
                    "subtype": "success",
                    "request_id": "r1",
                    "response": {"behavior": "deny", "message": "no answer", "interrupt": True},
                },
            }
        ),
        "stdin",
    )
    n.feed(lines(tool_result("t1", "The user doesn't want to proceed", True)))
    tool = n.entries[0].type.tool  # type: ignore[union-attr]
    assert (tool.status, tool.approval.decision, tool.approval.reason) == (
        "timed_out",
        "timed_out",
        "no answer in 1 s",
    )


def test_cancel_request_cancels_the_pending_approval() -> None:
    request = {
        "type": "control_request",
        "request_id": "r1",
        "request": {
            "subtype": "can_use_tool",
            "tool_name": "Bash",
            "input": {"command": "x"},
            "tool_use_id": "t1",
        },
    }
    n = normalize(
        lines(
            tool_use("t1", "Bash", {"command": "x"}),
            request,
            {"type": "control_cancel_request", "request_id": "r1"},
        )
    )
    tool = n.entries[0].type.tool  # type: ignore[union-attr]
    assert (tool.status, tool.approval.decision) == ("cancelled", "cancelled")


def test_synthetic_api_error_and_auth_error() -> None:
    n = normalize(
        lines(
            {
                "type": "assistant",
                "is_api_error_message": True,
                "error": "authentication_failed",
                "message": {
                    "id": "x",
                    "model": "<synthetic>",
                    "content": [{"type": "text", "text": "Not logged in"}],
                },
            },
            {
                "type": "result",
                "subtype": "success",
                "is_error": True,
                "result": "Not logged in",
                "session_id": "s",
            },
        )
    )
    assert kinds(n) == ["error", "token_usage"]
    assert n.entries[0].type.error.code == "auth_required"  # type: ignore[union-attr]
    assert n.outcome == "failed"


def test_result_gives_usage_and_outcome() -> None:
    n = normalize(
        lines(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "session_id": "s1",
                "total_cost_usd": 0.5,
                "usage": {
                    "input_tokens": 3,
                    "output_tokens": 4,
                    "cache_read_input_tokens": 5,
                    "cache_creation_input_tokens": 6,
                },
                "modelUsage": {"m": {"contextWindow": 1000}},
            }
        )
    )
    usage = n.entries[0].type.usage  # type: ignore[union-attr]
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        3,
        4,
        5,
        6,
    )
    assert (usage.total_cost_usd, usage.context_window) == (0.5, 1000)
    assert n.outcome == "success" and n.log.session_id == "s1"


def test_init_repeated_each_turn_is_shown_once() -> None:
    init = {"type": "system", "subtype": "init", "session_id": "s", "model": "m"}
    n = normalize(lines(init, init, {**init, "model": "other"}))
    assert kinds(n) == ["system_message", "system_message"]
    assert n.entries[1].metadata and n.entries[1].metadata.model == "other"


def test_user_messages_come_from_stdin_and_replays_are_not_doubled() -> None:
    n = normalize(
        lines({"type": "user", "isReplay": True, "message": {"role": "user", "content": "hi"}}),
        stdin=lines({"type": "user", "message": {"role": "user", "content": "hi"}}),
    )
    assert [(e.type.kind, e.content) for e in n.entries] == [("user_message", "hi")]


def test_invalid_utf8_in_a_line_is_replaced() -> None:
    n = normalize(b'{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"a\xffb"}]}}\n')
    assert n.entries[0].content == "a\ufffdb"


# --- the normalizer's own lifetime -------------------------------------------------------------


def assert_freed_without_the_collector(folder: str, make: Callable[[], Normalizer], tables: int) -> None:
    """A replay of every fixture of ``folder`` leaves nothing for the garbage collector, and a
    bounded normalizer still sweeps its ``tables`` (test_replay_memory measures its memory)."""
    fixtures = sorted((Path(__file__).parent.parent / "fixtures" / folder).glob("*.jsonl"))
    assert fixtures
    gc.collect()
    gc.disable()
    try:
        for path in fixtures:
            assert list(replay(path, make()))
        assert gc.collect() == 0
    finally:
        gc.enable()
    streaming = make()
    assert list(replay(fixtures[0], streaming, streaming=True))
    assert len(streaming.log._tables) == tables


def test_a_finished_normalizer_is_freed_without_the_garbage_collector() -> None:
    """An unbounded normalizer holds no reference cycle (the bounded log's sweep hooks are tied in
    only when bound): a replay of many short runs frees each one when it is dropped, instead of
    leaving it to the collector, whose passes then walk every object alive."""
    assert_freed_without_the_collector("claude-stream-json", ClaudeStreamJsonNormalizer, 2)


@pytest.mark.parametrize("cost", [None, 0.0, 1.25])
@pytest.mark.parametrize("window", [None, 0, 200_000])
def test_the_built_turn_usage_is_the_validated_one(cost: float | None, window: int | None) -> None:
    """A result line's usage is built without validation (normalizers/built.py): field by field
    what the validating constructor gives for the same values, in the same order."""
    built = turn_usage(1, 2, 3, 4, cost, window)
    validated = TokenUsage(
        input_tokens=1,
        output_tokens=2,
        cache_read_tokens=3,
        cache_write_tokens=4,
        total_cost_usd=cost,
        context_window=window,
    )
    assert type(built) is TokenUsage
    assert built == validated
    assert list(built.__dict__.items()) == list(validated.__dict__.items())
    assert built.model_dump_json(by_alias=True) == validated.model_dump_json(by_alias=True)
