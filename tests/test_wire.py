"""The wire layer (issue 16 point 1): each line is framed and parsed once, and the peer and the
normalizer read that same parse, live and in replay; our own decisions are typed notes; the live
parts of a protocol are tied by types.  And the JSON-RPC rules of point 2 on the live path: a
request with an invalid id gets the spec's answer, an answer to nothing we asked is one entry."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from orchestrate import ApprovalDecision, ApprovalRequest, Run, Task
from orchestrate.errors import ConfigError
from orchestrate.executors.base import Executor, ExecutorOptions
from orchestrate.executors.claude_code import ClaudeCodeExecutor
from orchestrate.peers.jsonrpc import INVALID_REQUEST
from orchestrate.process.rawlog import read_raw_log
from orchestrate.run.driver import DriverContext
from orchestrate.run.protocols import PROTOCOLS, start_driver
from orchestrate.wire import framing as wire_framing
from orchestrate.wire import lines as wire_lines
from orchestrate.wire.lines import NOT_JSON, JsonLinesWire, LineDropped, WireLine, parse_line
from orchestrate.wire.notes import (
    Approval,
    ApprovalWithdrawn,
    Cwd,
    Exit,
    Interrupt,
    OtherNote,
    PermissionPrompt,
    Prepared,
    Restart,
    ResumedThread,
    RunError,
    Screen,
    Stopped,
    UserInput,
    parse_note,
)

from .helpers import FAST, FIXTURES, errors, run_agent, texts
from .hostile import hostile

# --- the wire --------------------------------------------------------------------------------


def test_a_line_is_parsed_into_one_event() -> None:
    line = parse_line('{"a": [1, 2]}', "stdout", None)
    assert line == WireLine(b'{"a": [1, 2]}', {"a": [1, 2]}, {"a": [1, 2]}, "stdout", None, None)
    assert line.text == '{"a": [1, 2]}'
    assert line.object == {"a": [1, 2]}
    broken = parse_line('{"a": ', "stdout", None)
    assert broken.value is NOT_JSON and broken.error == "not JSON" and broken.object is None
    plain = parse_line("Loading...", "stdout", None)
    assert plain.value is NOT_JSON and plain.error == "not a JSON object"
    assert parse_line("  [1]").value == [1] and parse_line("  [1]").object is None


def test_the_events_do_not_depend_on_chunk_boundaries() -> None:
    data = b'{"n": 1}\r\n\n  \n{"n": "\xc3\xa9"}\nnot json\n{"n": 3}'
    whole = JsonLinesWire()
    expected = [*whole.feed(data, "stdout", None), *whole.finish(None)]
    for size in (1, 2, 3, 7):
        wire = JsonLinesWire()
        got = [e for i in range(0, len(data), size) for e in wire.feed(data[i : i + size], "stdout", None)]
        assert [*got, *wire.finish(None)] == expected
    assert [e.value for e in expected if isinstance(e, WireLine)][:2] == [{"n": 1}, {"n": "é"}]
    assert len(expected) == 4


def test_a_line_over_the_limit_is_one_dropped_event_and_the_next_is_whole() -> None:
    wire = JsonLinesWire(max_line_bytes=16)
    events = list(wire.feed(b'{"x": "' + b"y" * 100 + b'"}\n{"ok": 1}\n', "stdout", None))
    assert isinstance(events[0], LineDropped) and events[0].length == 109
    assert isinstance(events[1], WireLine) and events[1].value == {"ok": 1}


def test_stderr_is_framed_but_never_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(wire_lines, "_loads", lambda text: calls.append(text))
    [line] = JsonLinesWire().feed(b'{"looks": "like json"}\n', "stderr", None)
    assert isinstance(line, WireLine) and line.value is NOT_JSON and calls == []


def test_invalid_utf8_in_a_json_line_reads_as_its_replaced_text() -> None:
    """The parser reads the line's bytes and takes only valid UTF-8: a line it refuses for that is
    read again as its text (invalid bytes replaced), as every other reader of the line sees it."""
    data = b'{"a": "x\xffy", "b": "\xe2\x82"}\n{"c": 1}\n'
    first, second = JsonLinesWire().feed(data, "stdout", None)
    assert isinstance(first, WireLine) and first.object == {"a": "x\ufffdy", "b": "\ufffd"}
    assert first.error is None and first.text == '{"a": "x\ufffdy", "b": "\ufffd"}'
    assert isinstance(second, WireLine) and second.object == {"c": 1}
    broken = parse_line(b'{"a": "\xff"', "stdout", None)
    assert broken.value is NOT_JSON and broken.error == "not JSON"


def test_a_line_is_decoded_only_when_its_text_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoding is a pass over every byte, and a chunk with one non-ASCII character decodes into a
    wide string that costs as much again to parse: a normalizer reading well-formed JSON lines
    decodes none of them; a line shown as it is (not JSON) is decoded when shown."""
    decoded: list[bytes] = []
    real = wire_framing.decode

    def counted(raw: bytes) -> str:
        decoded.append(raw)
        return real(raw)

    for module in (wire_lines, wire_framing):
        monkeypatch.setattr(module, "decode", counted)
    session = (FIXTURES / "claude-stream-json").glob("*.jsonl")
    records = [r for path in sorted(session) for r in read_raw_log(path)[1] if r.stream == "stdout"]
    normalizer = ClaudeCodeExecutor().create_normalizer()
    for record in records[:400]:
        normalizer.feed(record.data, "stdout", None)
    assert decoded == [] and len(normalizer.entries) > 20
    normalizer.feed(b"Loading \xc3\xa9...\n", "stdout", None)
    assert decoded == [b"Loading \xc3\xa9..."]
    assert normalizer.entries[-1].content == "Loading é..."


@pytest.mark.anyio
async def test_a_live_run_parses_each_line_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every orjson parse made during a live JSON-RPC run, counted: one per JSON line that crossed
    the pipes (the agent's and ours), not two (before the wire layer the peer parsed every stdout
    line again)."""
    parses = 0
    real = orjson.loads

    def counted(text: Any) -> Any:
        nonlocal parses
        parses += 1
        return real(text)

    monkeypatch.setattr(wire_lines, "_loads", counted)
    monkeypatch.setattr(orjson, "loads", counted)  # any other parse on the way, too
    executor = hostile("acp")
    task = Task(prompt="deltas=300", cwd=tmp_path, raw_log=tmp_path / "raw.jsonl")
    with anyio.fail_after(30):
        async with Run(executor, task, shutdown=FAST) as run:
            result = await run.wait()
    counted_during_run = parses
    monkeypatch.setattr(orjson, "loads", real)
    assert result.outcome == "success", errors(result)
    records = list(read_raw_log(tmp_path / "raw.jsonl")[1])
    lines = [
        line
        for stream in ("stdout", "stdin")
        for line in b"".join(r.data for r in records if r.stream == stream).splitlines()
        if line.lstrip().startswith(b"{")
    ]
    assert len(lines) > 300 and counted_during_run == len(lines)


# --- typed notes -----------------------------------------------------------------------------

NOTES = [
    RunError("timeout", "too slow"),
    RunError("protocol_error", "bad", line="{", stderr_tail="boom"),
    Restart(("claude", "-p"), "fresh"),
    Exit(0),
    Exit(None),
    Prepared(("moved a file",)),
    Approval("r1", "approved", None, True, False),
    Approval("r2", "denied", "no", question="elicitation", path="/x", command="ls"),
    ApprovalWithdrawn("r3"),
    Stopped("lingered"),
    ResumedThread("t1"),
    ResumedThread(None),
    Cwd("/work"),
    UserInput("hi"),
    Interrupt(),
    Screen(True, False),
    PermissionPrompt("screen-1", "rm -rf x", "Bash", "Allow?"),
]


@pytest.mark.parametrize("note", NOTES, ids=lambda n: type(n).__name__)
def test_a_note_reads_back_as_written(note: Any) -> None:
    raw = note.to_json()
    assert raw["type"] == note.kind
    assert parse_note(orjson.loads(orjson.dumps(raw))) == note


def test_notes_in_the_recorded_logs_read_as_their_types() -> None:
    """Every event record of every fixture (written as untyped dicts, before the types) reads as
    its type, and writes back as it was read."""
    seen = set()
    for path in sorted(FIXTURES.glob("*/*.jsonl")):
        _, records = read_raw_log(path)
        for rec in records:
            if rec.event is None:
                continue
            note = parse_note(rec.event)
            assert not isinstance(note, OtherNote), (path.name, rec.event)
            seen.add(type(note).__name__)
            assert parse_note(note.to_json()) == note
            for key, value in note.to_json().items():
                if rec.event.get(key) is not None:  # (a field the old writer left out stays out)
                    assert rec.event[key] == value, (path.name, key)
    assert {"Approval", "Exit", "RunError"} <= seen


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "approval", "request_id": {}, "decision": [], "reason": 5, "for_session": "x"},
        {"type": "run_error"},
        {"type": "restart", "argv": "claude"},
        {"type": "exit", "code": "1"},
        {"type": "screen", "idle": {}},
        {"type": {}},
        {"no": "type"},
        [],
    ],
)
def test_a_damaged_note_reads_without_raising(raw: Any) -> None:
    note = parse_note(raw)
    assert note.to_json()  # and it can be shown


# --- protocols tied by types -----------------------------------------------------------------


class _NotClaude(Executor):
    """A plugin that says it speaks stream-json without being Claude Code's executor."""

    name = "not-claude"
    protocol = "stream-json"
    program = "true"
    capabilities = ClaudeCodeExecutor.capabilities

    def build_argv(self, task: Task) -> list[str]:
        return ["true"]

    def create_normalizer(self) -> Any:
        return ClaudeCodeExecutor().create_normalizer()


def _context(executor: Executor, tmp_path: Path) -> DriverContext[Executor]:
    nothing: Any = None
    task = Task(prompt="x", cwd=tmp_path)
    return DriverContext(executor, task, nothing, nothing, nothing, print, lambda: None)


def test_a_driver_gets_only_the_executor_it_is_written_for(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="written for ClaudeCodeExecutor"):
        start_driver(_context(_NotClaude(ExecutorOptions()), tmp_path))
    unknown = type("Unknown", (_NotClaude,), {"name": "unknown", "protocol": "carrier-pigeon"})
    with pytest.raises(ConfigError, match="no live driver 'carrier-pigeon'"):
        start_driver(_context(unknown(ExecutorOptions()), tmp_path))


def test_every_protocol_loads_a_driver_of_its_executor() -> None:
    for name, protocol in PROTOCOLS.items():
        driver, executor = protocol.driver(), protocol.executor()
        assert issubclass(executor, Executor), name
        # the driver's declared executor type is the one the protocol checks for
        bases = [b for b in getattr(driver, "__orig_bases__", ()) if getattr(b, "__args__", None)]
        assert bases and bases[0].__args__ == (executor,), name


# --- JSON-RPC on the live path (point 2) -----------------------------------------------------


class _Recording:
    """An approval service that approves and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request.request_id)
        return ApprovalDecision.approve()


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", ["acp", "codex"])
async def test_invalid_ids_get_the_spec_answer_and_unknown_answers_one_entry_each(
    tmp_path: Path, protocol: str
) -> None:
    person = _Recording()
    result, _ = await run_agent(hostile(protocol), tmp_path, "badids", person, within=20)
    assert result.outcome == "success", errors(result)
    assert "after the bad ids" in texts(result, "assistant_message")
    assert result.raw_log is not None
    records = list(read_raw_log(result.raw_log)[1])
    stdin = b"".join(r.data for r in records if r.stream == "stdin")
    sent = [orjson.loads(line) for line in stdin.splitlines()]
    # each of the four bad requests: exactly the spec's answer, id null, code -32600, and no other
    answers = [m for m in sent if "method" not in m and "id" in m and m.get("id") is None]
    assert len(answers) == 4, sent
    for answer in answers:
        assert answer["error"]["code"] == INVALID_REQUEST == -32600
        assert set(answer) == ({"jsonrpc", "id", "error"} if protocol == "acp" else {"id", "error"})
        assert "is not a string or an integer" in answer["error"]["message"]
    assert person.asked == []  # none of them was served
    shown = [message for code, message in errors(result) if code == "protocol_error"]
    assert shown.count("The agent sent a JSON-RPC message with an invalid id") == 4, shown
    # an answer to a request never sent, and a second answer to one answered: one entry each
    assert shown.count("The agent answered request 424242, which is not pending") == 1, shown
    again = [m for m in shown if "which is not pending" in m and "424242" not in m]
    assert len(again) == 1, shown
    assert len(shown) == 6, shown


def test_the_peer_and_the_normalizer_read_the_same_parse() -> None:
    """The live run hands the normalizer's own wire events to the driver: one object per line."""
    normalizer = ClaudeCodeExecutor().create_normalizer()
    data = b'{"type": "result", "subtype": "success"}\n{"type": "assistant"}\nnot json\n{"x"'
    seen: list[WireLine] = []

    def keep(line: WireLine) -> bool:
        seen.append(line)
        return line.object is not None and line.object.get("type") == "result"

    events, _ = normalizer.feed_wire(data, "stdout", None, keep)
    assert [line.text for line in seen] == [data.decode().splitlines()[i] for i in range(3)]
    [line] = events
    assert line is seen[0]  # the very object the normalizer read: not parsed again
    assert isinstance(line, WireLine) and line.object == {"type": "result", "subtype": "success"}
    from orchestrate.peers.claude_control import ClaudeControlPeer, TurnEnded

    assert ClaudeControlPeer().receive(line) == [TurnEnded(False, "success")]
    assert dataclasses.is_dataclass(NOTES[0])


def test_a_line_the_driver_cannot_judge_is_handed_to_it() -> None:
    """The driver's filter may trip on a line of the wrong shape: the line is kept for the driver
    (whose own guard turns what it does into an entry) and the normalizer goes on."""

    def wants(line: WireLine) -> bool:
        return bool(line.object and line.object["type"] == "control_request")  # KeyError: no type

    normalizer = ClaudeCodeExecutor().create_normalizer()
    data = b'{"no_type": 1}\n{"type": "control_request", "request_id": "r"}\n{"type": "other"}\n'
    kept, _ = normalizer.feed_wire(data, "stdout", None, wants)
    request = b'{"type": "control_request", "request_id": "r"}'
    assert [line.raw for line in kept] == [b'{"no_type": 1}', request]
