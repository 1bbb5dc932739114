"""Real captures as benchmark input: every fixture of one protocol, as the chunks that crossed the
pipes, repeated until the input reaches a size.  Shared by the benchmarks in this folder.

A fixture is a raw log of one run; its ``stdout``/``stdin``/``stderr`` chunks and the client's
notes are kept in order, and a boundary marks where the next run starts.  :func:`normalize` gives
each run a fresh normalizer, as a live run has (``one_session=True`` feeds everything to one: a
long session where the same ids come back, the stress case for per-id tables).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from orchestrate import get_executor
from orchestrate.normalizers.base import Normalizer
from orchestrate.process.rawlog import read_raw_log

__all__ = [
    "FIXTURES",
    "PIPE_CHUNK",
    "PROTOCOLS",
    "Corpus",
    "Segment",
    "bare",
    "best_of",
    "floor",
    "load",
    "normalize",
]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PIPE_CHUNK = 64 * 1024
# protocol folder -> the executor whose normalizer reads it
PROTOCOLS = {
    "claude-stream-json": "claude-code",
    "codex-app-server": "codex",
    "codex-exec": "codex-exec",
    "acp-gemini": "gemini",
    "acp-qwen": "qwen",
    "cursor-jsonl": "cursor",
}


@dataclass(frozen=True, slots=True)
class Segment:
    """Consecutive bytes of one stream, or one note of the client's (``stream`` None), or the
    start of the next run (``stream`` and ``event`` None)."""

    stream: str | None
    data: bytes = b""
    event: dict[str, Any] | None = None


RUN_START = Segment(None)


@dataclass(frozen=True)
class Corpus:
    protocol: str
    segments: list[Segment]

    @property
    def size(self) -> int:
        return sum(len(s.data) for s in self.segments)

    @property
    def lines(self) -> int:
        return sum(s.data.count(b"\n") for s in self.segments)


def fixture_segments(path: Path) -> list[Segment]:
    """One fixture's records, consecutive chunks of one stream joined (the whole-input form)."""
    out: list[Segment] = []
    for rec in read_raw_log(path)[1]:
        if rec.event is not None:
            out.append(Segment(None, event=rec.event))
        elif rec.stream is not None:
            if out and out[-1].stream == rec.stream:
                out[-1] = Segment(rec.stream, out[-1].data + rec.data)
            else:
                out.append(Segment(rec.stream, rec.data))
    return out


def load(protocol: str, target_bytes: int = 0, *, repeats: int = 0) -> Corpus:
    """Every fixture of ``protocol`` in name order, repeated until ``target_bytes`` are reached
    (or exactly ``repeats`` times)."""
    per_fixture = [fixture_segments(p) for p in sorted((FIXTURES / protocol).glob("*.jsonl"))]
    segments: list[Segment] = []
    size = rounds = 0
    while size < target_bytes or rounds < repeats:
        rounds += 1
        for segs in per_fixture:
            segments.append(RUN_START)
            segments.extend(segs)
            size += sum(len(s.data) for s in segs)
    return Corpus(protocol, segments)


def chunks(corpus: Corpus, chunk: int | None) -> Iterator[Segment]:
    """The segments, each stream's bytes cut into ``chunk``-byte pieces (None: whole)."""
    for seg in corpus.segments:
        if seg.stream is None or chunk is None or len(seg.data) <= chunk:
            yield seg
        else:
            for i in range(0, len(seg.data), chunk):
                yield Segment(seg.stream, seg.data[i : i + chunk])


def floor(pieces: list[Segment]) -> int:
    """What any consumer must do anyway: split each stream into lines and orjson-parse each one."""
    bufs: dict[str, bytearray] = {}
    n = 0
    for seg in pieces:
        if seg.stream is None:
            continue
        buf = bufs.setdefault(seg.stream, bytearray())
        buf += seg.data
        end = buf.rfind(b"\n")
        if end < 0:
            continue
        lines = bytes(buf[:end]).split(b"\n")
        del buf[: end + 1]
        for line in lines:
            if line.strip():
                try:  # noqa: SIM105 - the floor must not pay for a context manager per line
                    orjson.loads(line)
                except orjson.JSONDecodeError:
                    pass
                n += 1
    return n


def bare(pieces: list[Segment]) -> int:
    """The least a normalizer written in Python could do on top of the floor: per JSON line, look
    up its kind and its item's id, keep one tuple per line in a table by id.  No entry model, no
    protocol logic: what is left of the per-line budget after this is all a real one gets.  (It
    repeats :func:`floor`'s framing on purpose: shared, the floor, the baseline, would pay a call
    per segment, or this would frame differently from it.)"""
    bufs: dict[str, bytearray] = {}
    kept: list[tuple[Any, ...]] = []
    table: dict[Any, tuple[Any, ...]] = {}
    for seg in pieces:
        if seg.stream is None:
            if seg.event is None:
                table = {}
            continue
        buf = bufs.setdefault(seg.stream, bytearray())
        buf += seg.data
        end = buf.rfind(b"\n")
        if end < 0:
            continue
        lines = bytes(buf[:end]).split(b"\n")
        del buf[: end + 1]
        for line in lines:
            if line.strip():
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if type(obj) is not dict:
                    continue
                kind = obj.get("type") or obj.get("method")
                item = obj.get("item") or obj.get("params") or obj.get("message")
                key = item.get("id") if type(item) is dict else kind
                entry = (kind, key, table.get(key))
                table[key] = entry
                kept.append(entry)
    return len(kept)


def normalizer(protocol: str) -> Normalizer:
    return _EXECUTORS[protocol].create_normalizer()


_EXECUTORS = {protocol: get_executor(name) for protocol, name in PROTOCOLS.items()}


def normalize(protocol: str, pieces: list[Segment], *, one_session: bool = False) -> int:
    """Every piece through a normalizer of ``protocol``, a fresh one for each run (or one for
    all); the number of patches."""
    n = normalizer(protocol)
    count = 0
    for seg in pieces:
        if seg.stream is None and seg.event is None:
            if not one_session:
                count += len(n.finish())
                n = normalizer(protocol)
        elif seg.stream is None:
            assert seg.event is not None
            count += len(n.note(seg.event))
        else:
            count += len(n.feed(seg.data, seg.stream))  # type: ignore[arg-type]
    return count + len(n.finish())


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """The fastest of ``repeat`` runs: the least disturbed by the rest of a shared machine."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
