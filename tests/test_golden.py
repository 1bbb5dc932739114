"""Every normalizer on fixtures recorded from the real CLIs: golden entries, chunking invariance,
and the published schema.  One folder per wire protocol; a fixture without expectation fails."""

from __future__ import annotations

import random
import re
from typing import Any

import jsonschema
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrate import get_executor
from orchestrate.entries import EntryPatch, entry_json_schema
from orchestrate.normalizers.base import Normalizer
from orchestrate.process.rawlog import RawRecord, read_raw_log
from orchestrate.replay import replay

from .helpers import FIXTURES

# fixture folder -> the executor whose normalizer reads it
FOLDERS = {
    "claude-stream-json": "claude-code",
    "codex-app-server": "codex",
    "codex-exec": "codex-exec",
    "acp-gemini": "gemini",
    "acp-qwen": "qwen",
    "cursor-jsonl": "cursor",
}
CASES = sorted((folder, p.stem) for folder in FOLDERS for p in (FIXTURES / folder).glob("*.jsonl"))
IDS = [f"{folder}/{case}" for folder, case in CASES]


def normalizer_for(folder: str) -> Normalizer:
    return get_executor(FOLDERS[folder]).create_normalizer()


def test_every_fixture_has_an_expectation_and_every_protocol_enough_fixtures() -> None:
    for folder in FOLDERS:
        fixtures = list((FIXTURES / folder).glob("*.jsonl"))
        assert len(fixtures) >= 8, f"{folder} has only {len(fixtures)} fixtures"
        for fixture in fixtures:
            assert fixture.with_suffix(".entries.json").exists(), f"{fixture.name} has no expected entries"
        for expected in (FIXTURES / folder).glob("*.entries.json"):
            assert (FIXTURES / folder / expected.name.replace(".entries.json", ".jsonl")).exists()


@pytest.mark.parametrize(("folder", "case"), CASES, ids=IDS)
def test_golden(folder: str, case: str) -> None:
    expected = orjson.loads((FIXTURES / folder / f"{case}.entries.json").read_bytes())
    normalizer = normalizer_for(folder)
    list(replay(FIXTURES / folder / f"{case}.jsonl", normalizer))
    assert [e.to_json_dict() for e in normalizer.entries] == expected


def test_fixtures_hold_no_machine_paths_or_keys() -> None:
    for folder in FOLDERS:
        for path in (FIXTURES / folder).iterdir():
            text = path.read_text()
            # An absolute /tmp/... or /root/... path (not one under /scratch, not a relative .x/tmp/).
            assert not re.search(r"(?<![\w./-])/(tmp|root)/", text), path.name
            assert str(FIXTURES.parent) not in text, path.name
            assert "sk-ant" not in text and "sk-test" not in text and "scripted-key" not in text, path.name


def _records(folder: str, case: str) -> list[RawRecord]:
    return list(read_raw_log(FIXTURES / folder / f"{case}.jsonl")[1])


def _feed(folder: str, records: list[RawRecord], split: Any) -> list[dict[str, Any]]:
    """The entries after feeding ``records`` cut up by ``split``, checked against the patches:
    applying every patch in order must give exactly the normalizer's entries."""
    n = normalizer_for(folder)
    patches: list[EntryPatch] = []
    last_ts = None
    for rec in records:
        last_ts = rec.ts or last_ts
        if rec.event is not None:
            patches += n.note(rec.event, rec.ts)
            continue
        assert rec.stream is not None
        for piece in split(rec.data):
            patches += n.feed(piece, rec.stream, rec.ts)
    patches += n.finish(last_ts)
    applied: list[Any] = []
    for patch in patches:
        if patch.op == "add":
            assert patch.index == len(applied), "adds must come in index order"
            applied.append(patch.entry)
        else:
            applied[patch.index] = patch.entry
    assert applied == n.entries
    return [e.to_json_dict() for e in n.entries]


@pytest.mark.parametrize(("folder", "case"), CASES, ids=IDS)
def test_same_entries_whole_and_byte_by_byte(folder: str, case: str) -> None:
    records = _records(folder, case)
    whole = _feed(folder, records, lambda d: [d])
    bytewise = _feed(folder, records, lambda d: [d[i : i + 1] for i in range(len(d))])
    assert bytewise == whole
    assert whole == orjson.loads((FIXTURES / folder / f"{case}.entries.json").read_bytes())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), seed=st.integers(0, 2**32 - 1))
def test_same_entries_at_random_splits(case: tuple[str, str], seed: int) -> None:
    rng = random.Random(seed)

    def split(data: bytes) -> list[bytes]:
        if len(data) < 2:
            return [data]
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 8))))
        return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]

    records = _records(*case)
    assert _feed(case[0], records, split) == _feed(case[0], records, lambda d: [d])


def test_real_output_validates_against_the_published_schema() -> None:
    validator = jsonschema.Draft202012Validator(entry_json_schema())
    count = 0
    for folder, case in CASES:
        for patch in replay(FIXTURES / folder / f"{case}.jsonl", normalizer_for(folder)):
            validator.validate(patch.to_json_dict())
            count += 1
    assert count > 300


def test_schema_rejects_what_is_not_an_entry() -> None:
    validator = jsonschema.Draft202012Validator(entry_json_schema())
    bad = {"op": "add", "index": 0, "entry": {"index": 0, "type": {"kind": "nonsense"}, "content": ""}}
    assert not validator.is_valid(bad)
