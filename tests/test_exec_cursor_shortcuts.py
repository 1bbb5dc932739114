"""The shortcuts of codex exec's and Cursor's normalizers give what the general path gives.

Each one skips work (a model's generic construction, shaping an action again, an incremental
decoder, building a file change's action twice); these tests hold each to the general path on
inputs chosen to reach the cases where it must not apply.  tests/test_patch_stream.py pins the
fixtures' whole patch streams besides.
"""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrate.entries import (
    CommandResult,
    CommandRun,
    ErrorEntry,
    ErrorInfo,
    FileChange,
    FileEdit,
    TokenUsage,
    TokenUsageEntry,
    ToolResult,
    ToolUse,
    ToolUseEntry,
)
from orchestrate.normalizers.base import EntryLog, LineNormalizer
from orchestrate.normalizers.built import (
    command_result,
    command_run,
    error_entry,
    tool_call,
    tool_result,
    tool_use,
    turn_usage,
    usage_entry,
)
from orchestrate.normalizers.claude_stream_json import ClaudeStreamJsonNormalizer
from orchestrate.normalizers.codex_exec_jsonl import CodexExecNormalizer
from orchestrate.normalizers.codex_items import display_command
from orchestrate.normalizers.cursor_jsonl import CursorNormalizer
from orchestrate.wire.notes import _KINDS, Cwd


def _same(built: object, validated: object) -> None:
    assert built == validated
    assert type(built) is type(validated)
    assert built.model_dump_json(by_alias=True) == validated.model_dump_json(by_alias=True)  # type: ignore[attr-defined]
    assert built.__dict__ == validated.__dict__  # (every field there, in the model's order)
    assert list(built.__dict__) == list(validated.__dict__)


@settings(max_examples=50, deadline=None)
@given(
    counts=st.tuples(*[st.integers(min_value=-5, max_value=10**12)] * 4),
    success=st.booleans(),
    data=st.none() | st.text(max_size=5) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    error=st.none() | st.text(max_size=5),
    status=st.sampled_from(["created", "running", "success", "failed"]),
    call_id=st.none() | st.text(max_size=4),
)
def test_built_models_are_the_validated_ones(
    counts: tuple[int, int, int, int],
    success: bool,
    data: object,
    error: str | None,
    status: str,
    call_id: str | None,
) -> None:
    usage = turn_usage(*counts)
    validated_usage = TokenUsage(
        input_tokens=counts[0],
        output_tokens=counts[1],
        cache_read_tokens=counts[2],
        cache_write_tokens=counts[3],
    )
    _same(usage, validated_usage)
    _same(usage_entry(usage), TokenUsageEntry(usage=validated_usage))
    result = tool_result(success, data, error)
    _same(result, ToolResult(success=success, data=data, error=error))
    action = CommandRun(command="ls")
    call = tool_call("shell", action, status, result, call_id)  # type: ignore[arg-type]
    validated_call = ToolUseEntry(
        tool_name="shell",
        action=action,
        status=status,  # type: ignore[arg-type]
        result=result,
        tool_call_id=call_id,
    )
    _same(call, validated_call)
    _same(tool_use(call), ToolUse(tool=validated_call))
    _same(command_run("ls"), CommandRun(command="ls"))
    outcome = command_result(counts[0], error, None if success else error)
    _same(outcome, CommandResult(exit_code=counts[0], stdout=error, stderr=None if success else error))
    _same(command_run("ls", outcome), CommandRun(command="ls", result=outcome))
    message = error or ""
    _same(error_entry(message, status), ErrorEntry(error=ErrorInfo(message=message, code=status)))


def _exec_run(n: CodexExecNormalizer, lines: list[dict[str, object]]) -> list[dict[str, object]]:
    out = [p.model_dump(mode="json") for p in n.note(Cwd("/w"))]
    out += [p.model_dump(mode="json") for p in n.feed(b"".join(orjson.dumps(x) + b"\n" for x in lines))]
    return out + [p.model_dump(mode="json") for p in n.finish()]


def _file_change(item_id: str, event: str, changes: object, status: str) -> dict[str, object]:
    return {
        "type": event,
        "item": {"id": item_id, "type": "file_change", "changes": changes, "status": status},
    }


def test_a_file_change_keeps_its_action_only_when_its_files_are_the_same() -> None:
    """The completion with the files it started with keeps the action; other files rebuild it
    (the general path, with the shortcut's table emptied before each line, is the reference)."""
    add = [{"path": "/w/a.py", "kind": "add"}]
    edit = [{"path": "/w/a.py", "kind": "update"}, {"path": "/elsewhere/b.py", "kind": "add"}]
    cases = [
        [
            _file_change("i", "item.started", add, "in_progress"),
            _file_change("i", "item.completed", add, "completed"),
        ],
        [
            _file_change("i", "item.started", add, "in_progress"),
            _file_change("i", "item.completed", edit, "failed"),
        ],
        [
            _file_change("i", "item.started", add, "in_progress"),
            _file_change("i", "item.updated", add, "in_progress"),
            _file_change("i", "item.started", edit, "in_progress"),
            _file_change("i", "item.completed", add, "completed"),
        ],
        [
            _file_change("i", "item.started", "not a list", "in_progress"),
            _file_change("i", "item.completed", [], "x"),
        ],
    ]

    class General(CodexExecNormalizer):
        def feed_line(self, wire):  # type: ignore[no-untyped-def]
            self._changes.clear()
            super().feed_line(wire)

    for lines in cases:
        fast = _exec_run(CodexExecNormalizer(), lines)
        assert fast == _exec_run(General(), lines)
        tools = [p["entry"]["type"]["tool"] for p in fast if p["entry"]["type"]["kind"] == "tool_use"]  # type: ignore[index]
        assert tools[-1]["status"] in ("success", "failed")


def test_a_tool_update_shapes_again_after_the_working_directory_changed() -> None:
    """update_tool skips shaping an action shaped when it was set, unless the working directory
    changed since: then the paths are made relative to the new one, as the general path does."""
    log_owner = CodexExecNormalizer()
    log: EntryLog = log_owner.log
    action = FileEdit(
        path="/w/x.py", changes=(FileChange(type="edit", unified_diff="--- a/w/x.py\n+++ b/w/x.py\n"),)
    )
    index = log.add(
        ToolUse(tool=ToolUseEntry(tool_name="edit", action=action, status="running")), "`/w/x.py`"
    )
    log_owner.work_dir = "/w"  # (after the entry was added: its action was shaped for no directory)
    log.update_tool(index, status="success")
    tool = log.tool(index)
    assert tool is not None and isinstance(tool.action, FileEdit)
    assert tool.action.path == "x.py"
    assert tool.action.changes[0].unified_diff == "--- a/x.py\n+++ b/x.py\n"
    # Added after: shaped at once; an update keeps that very action.
    later = log.add(ToolUse(tool=ToolUseEntry(tool_name="edit", action=action, status="running")), "")
    shaped = log.tool(later)
    log.update_tool(later, status="failed")
    after = log.tool(later)
    assert (
        shaped is not None
        and after is not None
        and after.action is shaped.action
        and after.status == "failed"
    )


@settings(max_examples=60, deadline=None)
@given(prompt=st.text(max_size=12), cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=4))
def test_the_prompt_is_decoded_as_one_incremental_decoder_would(prompt: str, cuts: list[int]) -> None:
    data = prompt.encode() + b"\xff\xc3"  # (an invalid byte, and a character cut at the end)
    pieces, start = [], 0
    for cut in sorted(c for c in cuts if c <= len(data)):
        pieces.append(data[start:cut])
        start = cut
    pieces.append(data[start:])
    n = CodexExecNormalizer()
    for piece in pieces:
        n.feed(piece, "stdin")
    n.finish()
    expected = data.decode("utf-8", "replace")[:-1]  # (the cut character never completes: not shown)
    assert n.entries[0].content == expected


def test_streams_the_normalizers_ignore_are_not_framed() -> None:
    exec_n = CodexExecNormalizer()
    assert exec_n.feed(b'2026 INFO tracing\n{"type": "thread.started"}\n', "stderr") == []
    assert exec_n.finish() == []  # (no stderr line left to flush: it was never framed)
    cursor = CursorNormalizer()
    assert cursor.feed(b"the prompt, echoed later as a user event", "stdin") == []
    assert cursor.feed_wire(b"more\n", "stdin", None, lambda line: True) == ([], [])
    assert cursor.finish() == []
    errors = CursorNormalizer()
    patches = errors.feed(b"Authentication required. Please run 'cursor-agent login'\n", "stderr")
    assert [p.entry.type.kind for p in patches] == ["error"]


@settings(max_examples=100, deadline=None)
@given(
    wrapper=st.sampled_from(
        ["/bin/bash -lc ", "bash -lc ", "/bin/sh -c ", "sh -c ", "/bin/zsh -lc ", "env "]
    ),
    body=st.text(alphabet="ab '\"\\$ ", max_size=8),
    quote=st.booleans(),
)
def test_display_command_is_the_tokenizers_answer(wrapper: str, body: str, quote: bool) -> None:
    import shlex

    command = wrapper + (f"'{body}'" if quote else body)
    try:
        argv = shlex.split(command)
    except ValueError:
        expected = command
    else:
        known = [w.split() for w in ("/bin/bash -lc", "bash -lc", "/bin/sh -c", "sh -c", "/bin/zsh -lc")]
        expected = (
            argv[-1] if any(argv[: len(w)] == w and len(argv) == len(w) + 1 for w in known) else command
        )
    assert display_command(command) == expected


# One raw-log note of every kind (notes.py's own and a few a damaged or newer log may hold).
_NOTES: list[dict[str, object]] = [
    {"type": "run_error", "code": "process_exited", "message": "the agent exited", "line": "l"},
    {"type": "restart", "argv": ["agent"], "reason": "starting fresh"},
    {"type": "exit", "code": 1},
    {"type": "prepared", "actions": ["a"]},
    {"type": "approval", "request_id": "call_1", "decision": "denied", "reason": "no"},
    {"type": "approval", "request_id": "call_1", "decision": "timed_out", "reason": "late"},
    {"type": "approval", "request_id": "call_1", "decision": "approved", "for_session": True},
    {"type": "approval_withdrawn", "request_id": "call_1"},
    {"type": "stopped", "reason": "done"},
    {"type": "resumed_thread", "thread_id": "t1"},
    {"type": "cwd", "cwd": "/elsewhere"},
    {"type": "user_input", "text": "hi"},
    {"type": "interrupt"},
    {"type": "screen", "still": True, "idle": True},
    {"type": "permission_prompt", "request_id": "r", "what": "w", "tool": "t", "text": "x"},
    {"type": "from_a_newer_version"},
    {"type": ["not", "a", "kind"]},
    {"code": 1},
]

_MIDWAY: dict[type[LineNormalizer], list[dict[str, object]]] = {
    ClaudeStreamJsonNormalizer: [
        {"type": "system", "subtype": "init", "cwd": "/w", "model": "m", "session_id": "s"},
        {
            "type": "assistant",
            "message": {
                "id": "m1",
                "content": [{"type": "tool_use", "id": "tool_1", "name": "Bash", "input": {"command": "ls"}}],
            },
        },
        {
            "type": "control_request",
            "request_id": "call_1",
            "request": {"subtype": "can_use_tool", "tool_name": "Bash", "tool_use_id": "tool_1"},
        },
    ],
    CodexExecNormalizer: [
        {"type": "thread.started", "thread_id": "t1"},
        {"type": "turn.started"},
        {"type": "item.started", "item": {"id": "c1", "type": "command_execution", "command": "ls /w"}},
    ],
    CursorNormalizer: [
        {"type": "system", "subtype": "init", "cwd": "/w", "model": "m", "session_id": "s"},
        {
            "type": "tool_call",
            "subtype": "started",
            "call_id": "call_1",
            "tool_call": {"readToolCall": {"args": {"path": "/w/a"}}},
        },
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "hm"}]}},
    ],
}


def test_notes_a_normalizer_does_not_read_change_nothing() -> None:
    """codex exec, Cursor and Claude skip a raw log's note of a kind they do not act on (notes_read) without
    reading it into its type: given every kind of note midway through a run, each gives what the
    general path (every note read and handed to on_note) gives, patches and entries alike."""
    assert {n["type"] for n in _NOTES if isinstance(n.get("type"), str)} >= set(_KINDS)
    for cls, lines in _MIDWAY.items():
        general = type("General", (cls,), {"notes_read": None})
        assert cls.notes_read is not None
        for raw in _NOTES:
            outputs = []
            for make_one in (cls, general):
                n = make_one()
                n.feed(b"".join(orjson.dumps(x) + b"\n" for x in lines))
                patches = n.note(dict(raw)) + n.finish()
                outputs.append(
                    (
                        [p.model_dump(mode="json") for p in patches],
                        [e.model_dump(mode="json") for e in n.entries],
                        n.outcome,
                    )
                )
            assert outputs[0] == outputs[1], (cls.__name__, raw)


def test_error_entries_of_other_types_are_still_validated() -> None:
    """The log builds an error entry directly only from a message and code that are ``str``; a
    caller that hands it anything else gets the validating constructor's answer, as before."""
    log = EntryLog()
    index = log.error("boom", "api_error")
    _same(log.get(index).type, ErrorEntry(error=ErrorInfo(message="boom", code="api_error")))
    try:
        log.error(["not", "text"], "api_error")  # type: ignore[arg-type]
    except ValueError:  # (pydantic's ValidationError is one)
        pass
    else:
        raise AssertionError("a message that is not text was not refused")
