"""The raw log: every chunk that crossed the pipes, both ways, plus the client's own decisions.

One JSON object per line.  The first is a header; then, in the order they happened::

    {"type": "header", "format": "orchestrate-rawlog", "version": 1, "executor": ..., "argv": [...], ...}
    {"type": "chunk", "ts": 1763800000.123, "stream": "stdout", "data": "..."}     # valid UTF-8
    {"type": "chunk", "ts": ..., "stream": "stdout", "b64": "..."}                 # anything else
    {"type": "event", "ts": ..., "event": {"type": "approval", ...}}

Chunks are stored exactly as read, so replaying a log feeds a normalizer the same bytes it saw live.
A file that does not start with the header is read as a plain stdout capture of the CLI.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

import orjson

from ..errors import RawLogError

__all__ = ["FORMAT", "RawLogWriter", "RawRecord", "read_raw_log"]

FORMAT = "orchestrate-rawlog"
VERSION = 1
StreamName = Literal["stdout", "stderr", "stdin"]


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One chunk or one client event of a log, with its wall-clock time (None for plain captures)."""

    ts: datetime | None
    stream: StreamName | None = None
    data: bytes = b""
    event: dict[str, Any] | None = None


class RawLogWriter:
    """Appends records to a raw log file, flushing each so a crash loses nothing already read."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] | None = path.open("wb")
        self._write({"type": "header", "format": FORMAT, "version": VERSION, **header})

    def chunk(self, stream: StreamName, data: bytes, ts: float) -> None:
        rec: dict[str, Any] = {"type": "chunk", "ts": ts, "stream": stream}
        try:
            rec["data"] = data.decode("utf-8")
        except UnicodeDecodeError:
            rec["b64"] = base64.b64encode(data).decode("ascii")
        self._write(rec)

    def event(self, event: dict[str, Any], ts: float) -> None:
        self._write({"type": "event", "ts": ts, "event": event})

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write(self, rec: dict[str, Any]) -> None:
        if self._file is None:
            return
        self._file.write(orjson.dumps(rec) + b"\n")
        self._file.flush()


def read_raw_log(path: Path) -> tuple[dict[str, Any] | None, Iterator[RawRecord]]:
    """The header (None for a plain capture) and the records of ``path``, in order."""
    try:
        with path.open("rb") as f:
            first = f.readline()
    except OSError as exc:
        raise RawLogError(f"cannot read {path}: {exc.strerror or exc}") from exc
    header = _header(first)
    if header is None:
        return None, _plain(path)
    return header, _records(path)


def _header(line: bytes) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if isinstance(obj, dict) and obj.get("type") == "header" and obj.get("format") == FORMAT:
        return obj
    return None


def _plain(path: Path) -> Iterator[RawRecord]:
    # A capture can be large: hand it over in pieces, as a pipe would.
    with path.open("rb") as f:
        while piece := f.read(1 << 20):
            yield RawRecord(ts=None, stream="stdout", data=piece)


def _records(path: Path) -> Iterator[RawRecord]:
    with path.open("rb") as f:
        f.readline()
        for n, line in enumerate(f, start=2):
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
                yield _record(rec)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise RawLogError(f"{path}:{n}: not a raw log record ({exc})") from exc


def _record(rec: dict[str, Any]) -> RawRecord:
    ts = datetime.fromtimestamp(float(rec["ts"]), UTC) if rec.get("ts") is not None else None
    if rec["type"] == "event":
        return RawRecord(ts=ts, event=dict(rec["event"]))
    if rec["type"] != "chunk" or rec["stream"] not in ("stdout", "stderr", "stdin"):
        raise ValueError(f"unknown record type {rec.get('type')!r}")
    data = base64.b64decode(rec["b64"]) if "b64" in rec else str(rec["data"]).encode("utf-8")
    return RawRecord(ts=ts, stream=rec["stream"], data=data)


def default_log_dir() -> Path:
    """Where runs keep their raw logs unless told otherwise: $ORCHESTRATE_HOME/runs or ~/.orchestrate/runs."""
    home = os.environ.get("ORCHESTRATE_HOME")
    return (Path(home) if home else Path.home() / ".orchestrate") / "runs"
