"""Replay memory is flat in the transcript's length for a consumer that streams (issue 16).

Each measurement runs in a fresh interpreter (so one test's garbage is not another's peak): it
writes a synthetic Claude session of N turns (a streamed answer, a tool call and its result, the
turn's result, every id unique as in a real session), replays it as a raw log through
``replay(..., streaming=True)`` with a consumer that keeps nothing, and reports the peak of the
memory Python allocated during the replay (tracemalloc: exact, where RSS moves in pages).  The
default mode, which keeps every entry, is measured the same way to show the test can tell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from orchestrate.entries import EntryPatch, ErrorEntry
from orchestrate.normalizers.base import Normalizer
from orchestrate.registry import default_registry
from orchestrate.replay import normalizer_for_file, replay

from .helpers import ROOT

CHILD = r"""
import sys, tempfile, tracemalloc
from pathlib import Path
import orjson
from orchestrate import get_executor
from orchestrate.replay import replay

turns, streaming = int(sys.argv[1]), sys.argv[2] == "stream"
sid = "00000000-0000-4000-8000-000000000001"

def chunk(obj):
    data = orjson.dumps(obj).decode() + "\n"
    return orjson.dumps({"type": "chunk", "ts": 1.0, "stream": "stdout", "data": data}) + b"\n"

with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "raw.jsonl"
    with path.open("wb") as f:
        f.write(orjson.dumps({"type": "header", "format": "orchestrate-rawlog", "version": 1,
                              "executor": "claude-code"}) + b"\n")
        f.write(chunk({"type": "system", "subtype": "init", "session_id": sid, "model": "m"}))
        for t in range(turns):
            mid, tool = f"msg_{t}", f"toolu_{t}"
            ev = {"type": "stream_event", "session_id": sid, "parent_tool_use_id": None}
            f.write(chunk({**ev, "event": {"type": "message_start", "message": {"id": mid}}}))
            f.write(chunk({**ev, "event": {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text"}}}))
            for _ in range(5):
                f.write(chunk({**ev, "event": {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": "word " * 40}}}))
            f.write(chunk({**ev, "event": {"type": "content_block_stop", "index": 0}}))
            f.write(chunk({"type": "assistant", "session_id": sid, "message": {"id": mid, "content": [
                {"type": "text", "text": "word " * 200},
                {"type": "tool_use", "id": tool, "name": "Bash", "input": {"command": f"echo {t}"}}]}}))
            f.write(chunk({"type": "user", "session_id": sid, "message": {"content": [
                {"type": "tool_result", "tool_use_id": tool, "content": "out " * 100}]}}))
            f.write(chunk({"type": "result", "subtype": "success", "session_id": sid,
                           "is_error": False, "result": "done", "usage": {"input_tokens": 1}}))
    normalizer = get_executor("claude-code").create_normalizer()
    tracemalloc.start()
    patches = errors = 0
    for patch in replay(path, normalizer, streaming=streaming):
        patches += 1
        errors += patch.entry.type.kind == "error"
    print(patches, errors, tracemalloc.get_traced_memory()[1])
"""


def measure(turns: int, mode: str) -> tuple[int, int, int]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(turns), mode],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    patches, errors, peak = out.stdout.split()
    return int(patches), int(errors), int(peak)


def test_streaming_replay_memory_is_flat_in_the_transcripts_length() -> None:
    small_patches, small_errors, small = measure(500, "stream")
    big_patches, big_errors, big = measure(2000, "stream")
    assert big_patches > 3.9 * small_patches  # the same session, four times as long
    assert small_errors == big_errors == 0  # nothing was late: no entry_released notes
    assert big < 1.5 * small, (small, big)


def test_keeping_every_entry_grows_with_the_transcript() -> None:
    # The default mode (a caller that reads .entries afterwards): what the test above would see
    # if the streaming mode kept what it does not need.
    _, _, small = measure(500, "keep")
    _, _, big = measure(2000, "keep")
    assert big > 2.5 * small, (small, big)


# --- what a bounded log does with lines that come late (in process, fast) ------------------------

FIXTURE_EXECUTORS = {
    "claude-stream-json": "claude-code",
    "codex-app-server": "codex",
    "codex-exec": "codex-exec",
    "acp-gemini": "gemini",
    "acp-qwen": "qwen",
    "cursor-jsonl": "cursor",
}


def _patches(path: Path, executor: str, window: int | None) -> list[dict[str, object]]:
    normalizer = normalizer_for_file(path, default_registry.create(executor))
    if window is not None:
        normalizer.bound(window)
    return [p.to_json_dict() for p in replay(path, normalizer)]


def test_a_bounded_log_gives_every_fixture_the_same_patches() -> None:
    # A window of 8 entries is far below a real session's turn, yet every capture's patches are
    # the ones the default mode gives: what is released is never touched again.
    compared = 0
    for folder, executor in FIXTURE_EXECUTORS.items():
        for path in sorted((ROOT / "fixtures" / folder).glob("*.jsonl")):
            assert _patches(path, executor, 8) == _patches(path, executor, None), path
            compared += 1
    assert compared > 30


def _item(event: str, item_id: str, text: str) -> bytes:
    body = {"id": item_id, "type": "agent_message", "text": text}
    return orjson.dumps({"type": event, "item": body}) + b"\n"


def _late_revision(answers: int, window: int | None) -> tuple[list[EntryPatch], Normalizer]:
    """``answers`` codex exec answers, then a revision of the first one, then one more answer."""
    lines = [_item("item.completed", f"m{i}", f"answer {i}") for i in range(answers)]
    lines.append(_item("item.updated", "m0", "a late revision of the first answer"))
    lines.append(_item("item.completed", "last", "the answer after it"))
    normalizer = default_registry.create("codex-exec").create_normalizer()
    if window is not None:
        normalizer.bound(window)
    return [p for line in lines for p in normalizer.feed(line)] + normalizer.finish(), normalizer


def test_a_late_change_to_a_released_entry_is_a_note_not_a_crash() -> None:
    # Entry 0 is released (6 entries, a window of 4) but its item id is still known: the change
    # cannot be applied, and says so.
    patches, normalizer = _late_revision(6, 4)
    errors = [p.entry.type for p in patches if isinstance(p.entry.type, ErrorEntry)]
    assert [e.error.code for e in errors] == ["entry_released"]
    assert "entry 0" in errors[0].error.message
    assert patches[-1].entry.content == "the answer after it"  # and the stream went on
    assert len(normalizer.log) == 8 and len(normalizer.entries) <= 5
    # The default mode keeps every entry and revises the first one in place.
    patches, _ = _late_revision(6, None)
    assert (patches[-2].op, patches[-2].index) == ("replace", 0)
    assert patches[-2].entry.content == "a late revision of the first answer"
    assert not [p for p in patches if isinstance(p.entry.type, ErrorEntry)]


def test_a_late_line_for_a_forgotten_id_starts_a_fresh_entry() -> None:
    # Long after entry 0 went, the per-id table was swept too: the revision is a new entry.
    patches, normalizer = _late_revision(20, 4)
    assert not [p for p in patches if isinstance(p.entry.type, ErrorEntry)]
    assert (patches[-2].op, patches[-2].index) == ("add", 20)
    assert patches[-2].entry.content == "a late revision of the first answer"
    assert len(normalizer._items) <= 4 + 2  # type: ignore[attr-defined]  (the table is bounded)
