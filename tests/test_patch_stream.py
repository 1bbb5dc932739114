"""The exact patch stream of every fixture of every protocol, pinned.

The golden files (test_golden.py) pin each fixture's final entries, checked by hand; the speed work
on the normalizers, the log and the wire must not change the patches on the way there either (how
many, in which order, each entry's state in each, ``None`` fields and a bool where an int was
included).  Each fixture is replayed as recorded (one feed per raw-log record), fed whole (one feed
per run of the same stream, as bench/corpus.py feeds it) and replayed bounded; and a sample of its
fuzzed variants (one value of one line swapped for one of another type, as test_fuzz.py swaps them:
the protocol error entries those make are pinned too) is run.  Each digest is compared with the one
in tests/data/patch_digests.json.  After a deliberate change of output, record them again with
``ORCHESTRATE_RECORD_PATCH_DIGESTS=1 pytest tests/test_patch_stream.py`` and say why in the commit.

(The digests were first recorded from code that passed the two earlier pins they replace: the full
patch streams of codex exec and Cursor, and the digests of the Claude, app-server and ACP
fixtures, each recorded before the fourth round of speed work changed those normalizers.)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from orchestrate.entries import EntryPatch, NormalizedEntry
from orchestrate.normalizers.base import Normalizer
from orchestrate.process.rawlog import read_raw_log
from orchestrate.replay import replay
from orchestrate.wire.notes import parse_note

from .test_fuzz import _BAD_IDS, _SWAPS, Line, _get, _paths, _set, normalizer, run, units
from .test_golden import CASES, FIXTURES, FOLDERS, IDS

DIGESTS = Path(__file__).parent / "data" / "patch_digests.json"
RECORD = os.environ.get("ORCHESTRATE_RECORD_PATCH_DIGESTS") == "1"
FUZZED_PER_FIXTURE = 150
"""Fuzzed variants run per fixture, evenly spaced over all of them (every value of every line,
every swap: 23,000 for Claude's fixtures alone, half a minute)."""


def _normalizer(folder: str) -> Normalizer:
    return normalizer(folder, strict=False)


def _whole(path: Path, n: Normalizer) -> Iterator[EntryPatch]:
    """Consecutive records of one stream fed as one piece (notes and timestamps as replay has them)."""
    header, records = read_raw_log(path)
    if header is not None and isinstance(header.get("cwd"), str):
        n.work_dir = header["cwd"]
    pending: list[bytes] = []
    stream: Any = None
    ts = last_ts = None
    for rec in records:
        last_ts = rec.ts or last_ts
        if rec.stream is not None and rec.stream == stream:
            pending.append(rec.data)
            continue
        if pending:
            yield from n.feed(b"".join(pending), stream, ts)
            pending = []
        stream = rec.stream
        if rec.event is not None:
            yield from n.note(parse_note(rec.event), rec.ts)
        elif rec.stream is not None:
            pending, ts = [rec.data], rec.ts
    if pending:
        yield from n.feed(b"".join(pending), stream, ts)
    yield from n.finish(last_ts)


def _digest(models: Iterable[EntryPatch | NormalizedEntry]) -> str:
    # Every field, None ones too (to_json_dict leaves those out): a field left unset where it used
    # to be None, or a bool where an int was, changes the digest.
    h = hashlib.sha256()
    count = 0
    for model in models:
        h.update(orjson.dumps(model.model_dump(mode="json", by_alias=True), option=orjson.OPT_SORT_KEYS))
        h.update(b"\n")
        count += 1
    return f"{count}:{h.hexdigest()[:32]}"


def _variants(folder: str, case: str) -> list[tuple[int, tuple[str | int, ...], Any, list[Any]]]:
    """The fixture with one value of one line swapped for one of another type, a sample of
    :data:`FUZZED_PER_FIXTURE` evenly spaced over every value of every line and every swap."""
    seq = units(folder, case)
    every = []
    for k, unit in enumerate(seq):
        if not isinstance(unit, Line) or not unit.text.startswith("{"):
            continue
        obj = orjson.loads(unit.text)
        for path in _paths(obj):
            for new in _BAD_IDS if path == ("id",) else _SWAPS[type(_get(obj, path))]:
                every.append((k, path, new))
    step = max(1, -(-len(every) // FUZZED_PER_FIXTURE))
    out = []
    for k, path, new in every[::step]:
        unit = seq[k]
        line = Line(unit.stream, orjson.dumps(_set(orjson.loads(unit.text), path, new)).decode(), unit.ts)
        out.append((k, path, new, [*seq[:k], line, *seq[k + 1 :]]))
    return out


def _fuzzed(folder: str, case: str) -> str:
    h = hashlib.sha256()
    count = 0
    for k, path, new, seq in _variants(folder, case):
        n = _normalizer(folder)
        run(n, seq)
        h.update(orjson.dumps([k, list(path), repr(new), _digest(n.entries)]))
        count += 1
    return f"{count}:{h.hexdigest()[:32]}"


def _digests(folder: str, case: str) -> dict[str, str]:
    path = FIXTURES / folder / f"{case}.jsonl"
    return {
        "replay": _digest(replay(path, _normalizer(folder))),
        "whole": _digest(_whole(path, _normalizer(folder))),
        "bounded": _digest(replay(path, _normalizer(folder), streaming=True)),
        "fuzzed": _fuzzed(folder, case),
    }


def _expected() -> dict[str, dict[str, str]]:
    return orjson.loads(DIGESTS.read_bytes()) if DIGESTS.exists() else {}  # type: ignore[no-any-return]


def test_every_fixture_is_pinned() -> None:
    if RECORD:
        got = {name: _digests(folder, case) for name, (folder, case) in zip(IDS, CASES, strict=True)}
        DIGESTS.write_bytes(orjson.dumps(got, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    expected = _expected()
    assert sorted(expected) == sorted(IDS), "a fixture was added or removed: record the digests again"
    assert {name.split("/")[0] for name in expected} == set(FOLDERS)


@pytest.mark.parametrize(("folder", "case"), CASES, ids=IDS)
def test_patch_streams_are_unchanged(folder: str, case: str) -> None:
    assert _digests(folder, case) == _expected()[f"{folder}/{case}"]


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_the_digest_sees_a_change_of_one_patch(folder: str) -> None:
    # The pin can fail: one entry's content changed in one patch changes the digest; the sample
    # of fuzzed variants is not empty.
    case = next(c for f, c in CASES if f == folder)
    patches = list(replay(FIXTURES / folder / f"{case}.jsonl", _normalizer(folder)))
    assert len(patches) > 1
    entry = patches[-1].entry
    changed = entry.model_copy(update={"content": entry.content + "x"})
    altered = [*patches[:-1], patches[-1].model_copy(update={"entry": changed})]
    assert _digest(altered) != _digest(patches)
    assert sum(len(_variants(folder, c)) for f, c in CASES if f == folder) > 100


@pytest.mark.parametrize(
    ("window", "shown"),
    [(258400, 258400), (258400.0, 258400), ("258400", 258400), (True, 1), ("x", None), ([1], None)],
)
def test_a_context_window_of_another_type_is_still_validated(window: Any, shown: int | None) -> None:
    # The app-server's usage is built without validation when every value is an int; the context
    # window is the agent's own value: of another type it goes through pydantic as it always did
    # (coerced, or refused: then the turn's line is a protocol error entry, and the run goes on).
    usage = {"total": {"inputTokens": 100, "outputTokens": 20}, "modelContextWindow": window}
    lines = [
        {"method": "thread/tokenUsage/updated", "params": {"tokenUsage": usage}},
        {"method": "turn/completed", "params": {"turn": {"id": "t1", "status": "completed"}}},
        {"method": "configWarning", "params": {"summary": "after"}},
    ]
    n = _normalizer("codex-app-server")
    n.feed(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    n.finish()
    kinds = [e.type.kind for e in n.entries]
    if shown is None:
        assert kinds == ["error", "system_message"]
        assert n.entries[0].type.error.code == "protocol_error"  # type: ignore[union-attr]
    else:
        assert kinds == ["token_usage", "system_message"]
        usage_entry = n.entries[0].type
        assert usage_entry.usage.context_window == shown  # type: ignore[union-attr]
        assert type(usage_entry.usage.context_window) is int  # type: ignore[union-attr]
        assert usage_entry.usage.input_tokens == 100  # type: ignore[union-attr]
