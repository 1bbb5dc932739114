"""The exact patch stream of every Claude, app-server and ACP fixture, pinned.

The golden files (test_golden.py) pin each fixture's final entries; the speed work on these
normalizers must not change the patches on the way there either (how many, in which order, each
entry's state in each).  Each fixture is replayed as it was recorded (one feed per raw-log record),
fed whole (one feed per run of the same stream, as bench/corpus.py does), and replayed bounded;
the digest of each patch stream is compared with the one recorded in
tests/data/patch_digests.json.  After a deliberate change of output, regenerate that file with
``ORCHESTRATE_RECORD_PATCH_DIGESTS=1 pytest tests/test_patch_stream.py`` and say why in the commit.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from orchestrate import get_executor
from orchestrate.entries import EntryPatch
from orchestrate.normalizers.base import Normalizer
from orchestrate.process.rawlog import read_raw_log
from orchestrate.replay import replay
from orchestrate.wire.notes import parse_note

from .helpers import FIXTURES

FOLDERS = {
    "claude-stream-json": "claude-code",
    "codex-app-server": "codex",
    "acp-gemini": "gemini",
    "acp-qwen": "qwen",
}
CASES = sorted((folder, p.stem) for folder in FOLDERS for p in (FIXTURES / folder).glob("*.jsonl"))
DIGESTS = Path(__file__).parent / "data" / "patch_digests.json"
RECORD = os.environ.get("ORCHESTRATE_RECORD_PATCH_DIGESTS") == "1"


def _normalizer(folder: str) -> Normalizer:
    return get_executor(FOLDERS[folder]).create_normalizer()


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


def _digest(patches: Iterable[EntryPatch]) -> str:
    h = hashlib.sha256()
    count = 0
    for patch in patches:
        h.update(orjson.dumps(patch.to_json_dict(), option=orjson.OPT_SORT_KEYS))
        h.update(b"\n")
        count += 1
    return f"{count}:{h.hexdigest()[:32]}"


def _digests(folder: str, case: str) -> dict[str, str]:
    path = FIXTURES / folder / f"{case}.jsonl"
    return {
        "replay": _digest(replay(path, _normalizer(folder))),
        "whole": _digest(_whole(path, _normalizer(folder))),
        "bounded": _digest(replay(path, _normalizer(folder), streaming=True)),
    }


def test_patch_streams_are_unchanged() -> None:
    got = {f"{folder}/{case}": _digests(folder, case) for folder, case in CASES}
    if RECORD:
        DIGESTS.write_bytes(orjson.dumps(got, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    expected = orjson.loads(DIGESTS.read_bytes())
    assert sorted(expected) == sorted(got), "a fixture was added or removed: record the digests again"
    changed = [name for name in got if got[name] != expected[name]]
    assert not changed, f"patch streams changed: {changed}"


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_the_digest_sees_a_change_of_one_patch(folder: str) -> None:
    # The pin can fail: one entry's content changed in one patch changes the digest.
    case = next(c for f, c in CASES if f == folder)
    patches = list(replay(FIXTURES / folder / f"{case}.jsonl", _normalizer(folder)))
    assert len(patches) > 1
    entry = patches[-1].entry
    altered = [
        *patches[:-1],
        patches[-1].model_copy(update={"entry": entry.model_copy(update={"content": entry.content + "x"})}),
    ]
    assert _digest(altered) != _digest(patches)


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
