"""The raw log's batched write: records gathered as they are encoded and written by writev, in
order and whole, whatever the kernel takes per call."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from orchestrate.process import rawlog
from orchestrate.process.rawlog import RawLogWriter, read_raw_log


def _chunks(n: int) -> list[bytes]:
    return [b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * (i % 97)) for i in range(n)]


def _read_back(path: Path) -> list[bytes]:
    _, records = read_raw_log(path)
    return [r.data for r in records if r.stream == "stdout"]


def test_short_writes_go_on_from_where_they_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pipe or a signal can cut a writev short, even inside a record: the rest follows.
    real = os.writev
    calls: list[int] = []

    def short(fd: int, buffers: list[bytes]) -> int:
        taken = bytes(buffers[0])[:7] if len(calls) % 2 else b"".join(bytes(b) for b in buffers[:3])[:150]
        calls.append(len(taken))
        return real(fd, [taken])

    monkeypatch.setattr(rawlog.os, "writev", short)
    chunks = _chunks(300)
    log = RawLogWriter(tmp_path / "log.jsonl", {"executor": "t"}, flush_bytes=4096, flush_seconds=3600)
    for c in chunks:
        log.chunk("stdout", c, 1.0)
    log.close()
    assert log.failure is None and len(calls) > 100
    assert _read_back(tmp_path / "log.jsonl") == chunks


def test_more_records_than_one_writev_takes(tmp_path: Path) -> None:
    # 5,000 records in one flush: more than IOV_MAX pieces, written in several calls, in order.
    chunks = _chunks(5000)
    log = RawLogWriter(tmp_path / "log.jsonl", {"executor": "t"}, flush_bytes=1 << 30, flush_seconds=3600)
    for c in chunks:
        log.chunk("stdout", c, 1.0)
    log.close()
    assert log.failure is None
    assert _read_back(tmp_path / "log.jsonl") == chunks
    lines = (tmp_path / "log.jsonl").read_bytes().splitlines()
    assert len(lines) == 5001 and all(orjson.loads(line) for line in lines)


def test_a_writev_that_takes_nothing_turns_the_log_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rawlog.os, "writev", lambda fd, buffers: 0)
    log = RawLogWriter(tmp_path / "log.jsonl", {"executor": "t"}, flush_seconds=3600)
    log.chunk("stdout", b"x\n", 1.0)
    log.flush()
    failure = log.take_failure()
    assert failure is not None and "nothing was written" in failure
    log.chunk("stdout", b"y\n", 1.0)  # off: nothing more is tried, nothing raises
    log.close()
