"""The exact patch stream of the codex exec and Cursor normalizers, pinned: a speed-up of their
handlers must give every patch of every fixture as before, field for field (``None`` fields and
integer types included), fed as recorded, fed whole as the benchmark feeds it, and with each
line's types swapped as the fuzz test swaps them (the protocol errors those make included).

The expectations are in ``tests/data/patches/<folder>.json``: the full patch stream of each fixture,
and one digest per fixture over the entries of every fuzzed variant.  After a change that is meant
to change the output, rewrite them with ``ORCHESTRATE_WRITE_PATCHES=1`` and review the diff.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from orchestrate.entries import EntryPatch
from orchestrate.process.rawlog import read_raw_log

from .helpers import ROOT
from .test_fuzz import _BAD_IDS, _SWAPS, Line, _get, _paths, _set, normalizer, run, units
from .test_golden import CASES, FIXTURES

FOLDERS = ("codex-exec", "cursor-jsonl")
PINNED = [(folder, case) for folder, case in CASES if folder in FOLDERS]
EXPECTED = ROOT / "tests" / "data" / "patches"
WRITE = os.environ.get("ORCHESTRATE_WRITE_PATCHES") == "1"


def _dump(patches: list[EntryPatch]) -> list[dict[str, Any]]:
    # Every field, None ones too (to_json_dict leaves those out): a field left unset where it used
    # to be None, or a bool where an int was, shows here.
    return [p.model_dump(mode="json", by_alias=True) for p in patches]


def _recorded(folder: str, case: str, *, whole: bool) -> list[dict[str, Any]]:
    """The patches of the fixture fed chunk by chunk as recorded, or each stream's consecutive
    chunks joined into one (``bench/corpus.py``'s whole-input form)."""
    n = normalizer(folder)
    patches: list[EntryPatch] = []
    pending: tuple[str, bytes] | None = None
    for rec in read_raw_log(FIXTURES / folder / f"{case}.jsonl")[1]:
        if rec.stream is not None and whole:
            if pending is not None and pending[0] == rec.stream:
                pending = (rec.stream, pending[1] + rec.data)
                continue
            if pending is not None:
                patches += n.feed(pending[1], pending[0])  # type: ignore[arg-type]
            pending = (rec.stream, rec.data)
            continue
        if pending is not None:
            patches += n.feed(pending[1], pending[0])  # type: ignore[arg-type]
            pending = None
        if rec.event is not None:
            patches += n.note(rec.event, None if whole else rec.ts)
        elif rec.stream is not None:
            patches += n.feed(rec.data, rec.stream, rec.ts)
    if pending is not None:
        patches += n.feed(pending[1], pending[0])  # type: ignore[arg-type]
    patches += n.finish(None)
    return _dump(patches)


def _every_swap(folder: str, case: str) -> Iterator[tuple[int, tuple[str | int, ...], Any, list[Any]]]:
    """The fixture with one value of one line swapped for one of another type: every value of
    every line, every swap test_fuzz.py draws from (it draws a few; here all are pinned)."""
    seq = units(folder, case)
    for k, unit in enumerate(seq):
        if not isinstance(unit, Line) or not unit.text.startswith("{"):
            continue
        obj = orjson.loads(unit.text)
        for path in _paths(obj):
            options = _BAD_IDS if path == ("id",) else _SWAPS[type(_get(obj, path))]
            for new in options:
                line = Line(unit.stream, orjson.dumps(_set(obj, path, new)).decode(), unit.ts)
                yield k, path, new, [*seq[:k], line, *seq[k + 1 :]]


def _fuzzed_digest(folder: str, case: str) -> dict[str, Any]:
    """How many fuzzed variants the fixture has, and a digest of all their entries (not strict:
    a line the handlers cannot take becomes its protocol error entry, which is pinned too)."""
    digest = hashlib.sha256()
    count = 0
    for k, path, new, seq in _every_swap(folder, case):
        n = normalizer(folder, strict=False)
        run(n, seq)
        digest.update(orjson.dumps([k, list(path), repr(new)]))
        digest.update(orjson.dumps([e.model_dump(mode="json", by_alias=True) for e in n.entries]))
        count += 1
    return {"variants": count, "sha256": digest.hexdigest()}


def _actual(folder: str, case: str) -> dict[str, Any]:
    return {
        "recorded": _recorded(folder, case, whole=False),
        "whole": _recorded(folder, case, whole=True),
        "fuzzed": _fuzzed_digest(folder, case),
    }


def _expected(folder: str) -> dict[str, Any]:
    path = EXPECTED / f"{folder}.json"
    return orjson.loads(path.read_bytes()) if path.exists() else {}


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_pinned_fixture_has_its_patches(folder: str) -> None:
    if WRITE:
        expected = {case: _actual(f, case) for f, case in PINNED if f == folder}
        EXPECTED.mkdir(parents=True, exist_ok=True)
        (EXPECTED / f"{folder}.json").write_bytes(
            orjson.dumps(expected, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
        )
    cases = sorted(case for f, case in PINNED if f == folder)
    expected = _expected(folder)
    assert sorted(expected) == cases
    assert len(cases) >= 8
    assert sum(e["fuzzed"]["variants"] for e in expected.values()) > 500


@pytest.mark.parametrize(("folder", "case"), PINNED, ids=[f"{f}/{c}" for f, c in PINNED])
def test_patches_are_exactly_the_pinned_ones(folder: str, case: str) -> None:
    expected = _expected(folder)[case]
    actual = _actual(folder, case)
    assert actual["recorded"] == expected["recorded"]
    assert actual["whole"] == expected["whole"]
    assert actual["fuzzed"] == expected["fuzzed"]
    assert expected["recorded"]
