"""A bad line is an entry, never a crash: every fixture of every protocol, one value per line swapped
to a value of another type, through every normalizer.

The swaps are the ones real agents have been seen to make or that a hostile one would: a string
where an object goes, an object where a list goes, a number as a string, an id that is a list.  The
normalizers run in strict mode, so an exception is a failure here even though a live run would turn
it into a ``protocol_error`` entry: the values helpers are meant to absorb every wrong type where a
field is read, and the per-line guard is only the backstop.
"""

from __future__ import annotations

import pathlib
import random
import warnings
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import pytest

from orchestrate import get_executor
from orchestrate.entries import ErrorEntry, NormalizedEntry
from orchestrate.normalizers.base import Normalizer, Stream
from orchestrate.normalizers.claude_stream_json import ClaudeStreamJsonNormalizer
from orchestrate.normalizers.framing import LineFramer
from orchestrate.peers.jsonrpc import INVALID_REQUEST, InvalidRequest, JsonRpcPeer, MalformedMessage
from orchestrate.process.rawlog import read_raw_log
from orchestrate.wire.notes import Approval
from orchestrate.wire.notes import Note as ClientNote

from .helpers import errors, run_agent, texts
from .hostile import hostile
from .test_golden import CASES, FIXTURES, FOLDERS, IDS

SEED = 16
MUTATIONS_PER_LINE = 3


@dataclass(frozen=True)
class Line:
    stream: Stream
    text: str
    ts: datetime | None


@dataclass(frozen=True)
class Note:
    event: dict[str, Any]
    ts: datetime | None


Unit = Line | Note


def units(folder: str, case: str) -> list[Unit]:
    """The fixture as lines (re-framed from its chunks) and client events, in order."""
    framers = {s: LineFramer() for s in ("stdout", "stderr", "stdin")}
    out: list[Unit] = []
    for rec in read_raw_log(FIXTURES / folder / f"{case}.jsonl")[1]:
        if rec.event is not None:
            out.append(Note(rec.event, rec.ts))
        elif rec.stream is not None:
            lines = framers[rec.stream].feed(rec.data)
            out += [Line(rec.stream, t, rec.ts) for t in lines if isinstance(t, str)]
    for stream, framer in framers.items():
        out += [Line(stream, t, None) for t in framer.finish() if isinstance(t, str)]  # type: ignore[arg-type]
    return out


def normalizer(folder: str, *, strict: bool = True) -> Normalizer:
    n = get_executor(FOLDERS[folder]).create_normalizer()
    n.strict = strict
    return n


def run(n: Normalizer, seq: list[Unit]) -> list[int]:
    """Feed ``seq``; for each unit, how many entries existed after it."""
    counts = []
    for unit in seq:
        if isinstance(unit, Note):
            n.note(unit.event, unit.ts)
        else:
            n.feed(unit.text.encode() + b"\n", unit.stream, unit.ts)
        counts.append(len(n.log))
    n.finish(None)
    return counts


# --- the mutations --------------------------------------------------------------------------------

_SWAPS: dict[type, list[Any]] = {
    str: [{}, [], 7],
    bool: ["x", {}],
    int: ["x", {}, None],
    float: ["x", []],
    list: [None, {}, "x"],
    dict: [[], "x", None],
    type(None): [{}, "x"],
}
_BAD_IDS: list[Any] = [[1], {"a": 1}, 1.5, True, None]

Path = tuple[str | int, ...]


def _paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value[:8]):  # long arrays: their first items are enough
            yield (*prefix, i)
            yield from _paths(child, (*prefix, i))


def _get(value: Any, path: Path) -> Any:
    for step in path:
        value = value[step]
    return value


def _set(value: Any, path: Path, new: Any) -> Any:
    if not path:
        return new
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _set(value[path[0]], path[1:], new)
    return copy


def mutations(
    obj: dict[str, Any], rng: random.Random, *, agent: bool
) -> Iterator[tuple[Path, Any, dict[str, Any]]]:
    """Up to :data:`MUTATIONS_PER_LINE` copies of ``obj``, each with one value of another type:
    one top-level field, one nested one, and, on the agent's lines, the id where there is one (our
    own lines' ids come from our peer, which only makes integers)."""
    paths = [p for p in _paths(obj) if agent or p != ("id",)]
    top = [p for p in paths if len(p) == 1]
    deep = [p for p in paths if len(p) > 1]
    chosen: list[Path] = []
    if "id" in obj and agent:
        chosen.append(("id",))
    for pool in (top, deep, paths):
        if pool and len(chosen) < MUTATIONS_PER_LINE:
            chosen.append(rng.choice(pool))
    for path in dict.fromkeys(chosen):
        old = _get(obj, path)
        options = _BAD_IDS if path == ("id",) else _SWAPS[type(old)]
        new = rng.choice(options)
        yield path, new, _set(obj, path, new)


def mutated_fixtures(folder: str, case: str) -> Iterator[tuple[int, Path, Any, list[Unit]]]:
    seq = units(folder, case)
    rng = random.Random(SEED ^ zlib.crc32(f"{folder}/{case}".encode()))
    for k, unit in enumerate(seq):
        if not isinstance(unit, Line):
            continue
        try:
            obj = orjson.loads(unit.text)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        for path, new, bad in mutations(obj, rng, agent=unit.stream == "stdout"):
            line = Line(unit.stream, orjson.dumps(bad).decode(), unit.ts)
            yield k, path, new, [*seq[:k], line, *seq[k + 1 :]]


# --- checks ---------------------------------------------------------------------------------------


def assert_valid(entries: list[NormalizedEntry]) -> None:
    """Every entry is what its model says: a wrong type must not slip in through a model_copy."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for entry in entries:
            NormalizedEntry.model_validate_json(entry.model_dump_json(warnings="error"))


def crash_entries(entries: list[NormalizedEntry]) -> list[NormalizedEntry]:
    """The entries the per-line guard made of an exception."""
    return [e for e in entries if e.metadata and (e.metadata.extra or {}).get("exception")]


def _after(counts: list[int], n: Normalizer, k: int) -> Counter[str]:
    """Kinds of the entries added by the units after position ``k``."""
    start = counts[k]
    return Counter(e.type.kind for e in n.entries[start:] if not isinstance(e.type, ErrorEntry))


@pytest.mark.parametrize(("folder", "case"), CASES, ids=IDS)
def test_swapped_types_never_raise_and_later_lines_still_count(folder: str, case: str) -> None:
    original = normalizer(folder)
    seq = units(folder, case)
    counts = run(original, seq)
    tried = 0
    for k, path, new, bad_seq in mutated_fixtures(folder, case):
        where = f"{folder}/{case} line {k}: {'.'.join(map(str, path))} -> {new!r}"
        n = normalizer(folder)
        try:
            bad_counts = run(n, bad_seq)
        except Exception as exc:  # strict: the values helpers should have absorbed it
            raise AssertionError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        assert_valid(n.entries)
        # What the agent's lines after its bad one produce is still there: a lost line, a stuck
        # state machine or a guard that swallowed the rest would show as missing entries.  One may
        # go: a later line that only makes sense with the damaged one (the answer to a request whose
        # method was damaged).  Our own lines are damaged too, but only to see that nothing raises.
        if bad_seq[k].stream == "stdout":
            want, got = _after(counts, original, k), _after(bad_counts, n, k)
            missing = want - got
            assert sum(missing.values()) <= 1, f"{where}: entries after it lost: {dict(missing)}"
        tried += 1
    has_json = any(isinstance(u, Line) and u.text.startswith("{") for u in seq)
    assert tried > 0 or not has_json


def test_the_fuzzer_tries_enough() -> None:
    total = sum(1 for folder, case in CASES for _ in mutated_fixtures(folder, case))
    assert total > 3000, total


def test_every_mutated_line_through_every_other_normalizer() -> None:
    """Lines of one protocol fed to another's normalizer: nothing raises there either."""
    for folder, case in CASES[:: max(1, len(CASES) // 12)]:
        for k, _, _, bad_seq in mutated_fixtures(folder, case):
            unit = bad_seq[k]
            assert isinstance(unit, Line)
            for other in FOLDERS:
                n = normalizer(other)
                n.feed(unit.text.encode() + b"\n", unit.stream, None)
                n.finish(None)
                assert_valid(n.entries)


# --- the guard behind the values helpers ----------------------------------------------------------


class _Brittle(ClaudeStreamJsonNormalizer):
    """A normalizer with a bug: an assistant line saying "boom" raises."""

    def _assistant(self, obj: dict[str, Any], ts: datetime | None) -> None:
        if "boom" in orjson.dumps(obj).decode():
            raise KeyError("boom")
        super()._assistant(obj, ts)


def _assistant_line(text: str) -> bytes:
    message = {"id": text[:8], "content": [{"type": "text", "text": text}]}
    return orjson.dumps({"type": "assistant", "message": message}) + b"\n"


def test_an_exception_in_a_handler_costs_that_line_only() -> None:
    n = _Brittle()
    bad = _assistant_line("boom " + "x" * 5000)
    n.feed(_assistant_line("before") + bad + _assistant_line("after"))
    n.finish()
    assert [e.type.kind for e in n.entries] == ["assistant_message", "error", "assistant_message"]
    error = n.entries[1]
    assert isinstance(error.type, ErrorEntry) and error.type.error.code == "protocol_error"
    assert "KeyError" in error.type.error.message
    # the offending line, cut to a bounded size (the raw log keeps it whole)
    assert error.content.startswith(bad.decode()[:100]) and len(error.content) < 2100
    assert error.metadata is not None and error.metadata.extra == {
        "stream": "stdout",
        "exception": "KeyError",
        "lineLength": len(bad) - 1,  # (camelCase, as the JSON form has every metadata key)
    }
    assert n.entries[2].content == "after"
    assert crash_entries(n.entries) == [error]


def test_strict_mode_lets_the_exception_through() -> None:
    n = _Brittle()
    n.strict = True
    with pytest.raises(KeyError):
        n.feed(_assistant_line("boom"))


def test_a_client_event_that_breaks_a_handler_is_an_entry() -> None:
    class Brittle(_Brittle):
        def on_note(self, event: ClientNote, ts: datetime | None) -> None:
            if isinstance(event, Approval):
                raise TypeError("unhashable")
            super().on_note(event, ts)

    n = Brittle()
    n.note({"type": "approval", "request_id": "r1", "decision": "timed_out"})
    n.note({"type": "run_error", "message": "still heard", "code": "timeout"})
    assert [e.type.kind for e in n.entries] == ["error", "error"]
    assert "TypeError" in n.entries[0].type.error.message  # type: ignore[union-attr]
    assert '"request_id":"r1"' in n.entries[0].content
    assert n.entries[1].content == "still heard"


@pytest.mark.parametrize(("folder", "case"), CASES, ids=IDS)
def test_no_golden_fixture_needs_the_guard(folder: str, case: str) -> None:
    """Real traffic never reaches the backstop: a guard entry there would be a bug hidden."""
    n = normalizer(folder, strict=False)
    run(n, units(folder, case))
    assert crash_entries(n.entries) == []


# --- live: a fake agent that prints wrong-typed lines mid-stream ----------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", ["claude", "acp", "codex"])
async def test_a_live_run_survives_wrong_types_mid_stream(tmp_path: pathlib.Path, protocol: str) -> None:
    result, _ = await run_agent(hostile(protocol), tmp_path, "wrongtypes", within=20)
    assert result.outcome == "success", errors(result)
    # the answer after the bad lines is there, and the run ended the protocol's normal way
    assert "after the bad lines" in texts(result, "assistant_message")
    assert crash_entries(result.entries) == []  # the values helpers took it all; no guard needed
    assert all(code != "process_exited" for code, _ in errors(result))
    if protocol != "claude":  # the request whose id is a list got the spec's answer
        assert result.raw_log is not None
        sent = b"".join(r.data for r in read_raw_log(result.raw_log)[1] if r.stream == "stdin")
        answers = [orjson.loads(line) for line in sent.splitlines() if b'"error"' in line]
        assert any(a["id"] is None and a["error"]["code"] == INVALID_REQUEST for a in answers), answers


@pytest.mark.parametrize("bad_id", [[1], {"a": 1}, 1.5, True, None])
def test_a_request_with_an_invalid_id_gets_the_spec_answer(bad_id: Any) -> None:
    peer = JsonRpcPeer()
    event = peer.receive_line(
        orjson.dumps({"jsonrpc": "2.0", "id": bad_id, "method": "fs/read_text_file"}).decode()
    )
    assert isinstance(event, InvalidRequest)
    reply = orjson.loads(event.reply)
    assert reply["id"] is None and reply["error"]["code"] == INVALID_REQUEST == -32600
    # a response with such an id answers nothing: malformed, for the normalizer to show
    assert isinstance(
        peer.receive_line(orjson.dumps({"id": bad_id, "result": {}}).decode()), MalformedMessage
    )


def test_an_answer_to_nothing_we_asked_is_shown_once() -> None:
    for folder in ("codex-app-server", "acp-gemini"):
        n = normalizer(folder)
        n.feed(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n', "stdin")
        n.feed(b'{"jsonrpc":"2.0","id":1,"result":{}}\n{"jsonrpc":"2.0","id":1,"result":{}}\n')
        n.feed(b'{"jsonrpc":"2.0","id":"zz","error":{"code":1,"message":"m"}}\n')
        shown = [e.type.error.message for e in n.entries if isinstance(e.type, ErrorEntry)]
        assert shown == [
            "The agent answered request 1, which is not pending",
            "The agent answered request 'zz', which is not pending",
        ], folder
