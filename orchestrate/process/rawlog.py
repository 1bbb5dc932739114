"""The raw log: every chunk that crossed the pipes, both ways, plus the client's own decisions.

One JSON object per line.  The first is a header; then, in the order they happened::

    {"type": "header", "format": "orchestrate-rawlog", "version": 1, "executor": ..., "argv": [...], ...}
    {"type": "chunk", "ts": 1763800000.123, "stream": "stdout", "data": "..."}     # valid UTF-8
    {"type": "chunk", "ts": ..., "stream": "stdout", "b64": "..."}                 # anything else
    {"type": "event", "ts": ..., "event": {"type": "approval", ...}}

A log is private: the file is made 0600 and the directories made for it 0700, whatever the umask.
Secrets are redacted from what is written (``redact.py``; ``ORCHESTRATE_REDACT=0`` or
``Task.redact_raw_log=False`` turns that off for debugging).  Redacting works on whole lines, so a
stream's chunks may be regrouped: a partial line waits for its end, and a chunk record holds the
lines that chunk completed, with its time.  Replay gives the same entries, since normalizers act on
complete lines; before an event a normalizer may read partial state of (a screen, the ``exit`` or
``restart`` of a process) what is held is written first.  Unredacted, chunks are stored exactly as
read.

Writing never raises: records are batched in memory and written at turn ends (:meth:`flush`), at
close, and whenever :data:`FLUSH_BYTES` have gathered or :data:`FLUSH_SECONDS` have passed; an
error (a full disk, a read-only directory) turns the log off and is kept in
:attr:`RawLogWriter.failure` for the run to report.

A file that does not start with the header is read as a plain stdout capture of the CLI.  A line
of a log that cannot be read (damaged, or cut short by a crash) becomes a ``run_error`` event with
code ``raw_log_damaged``, and reading goes on with the next line.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

import orjson

from ..errors import RawLogError
from .redact import Redactor, StreamRedactor

__all__ = [
    "DAMAGED",
    "FORMAT",
    "RAW_LOG_FAILED",
    "RawLogWriter",
    "RawRecord",
    "open_private",
    "read_raw_log",
]

FORMAT = "orchestrate-rawlog"
VERSION = 1
StreamName = Literal["stdout", "stderr", "stdin"]
FLUSH_BYTES = 256 * 1024
FLUSH_SECONDS = 0.5
RAW_LOG_FAILED = "raw_log_failed"
"""The error code of the entry a run shows when its raw log could not be written."""
DAMAGED = "raw_log_damaged"
"""The error code of the entry a replay shows for a line it could not read."""
_STREAMS: tuple[StreamName, ...] = ("stdout", "stderr", "stdin")
# Events before which a normalizer reads partial lines: held bytes go out first.
_CUTTING_EVENTS = frozenset({"exit", "restart"})
_SHOWN = 200  # characters of a damaged line quoted in its error
# What reading one line can raise (ValueError covers JSON, base64 and a bad time).
_IOV_MAX = 1024  # records per writev: Linux's and macOS's limit on the pieces of one call
_UNREADABLE = (KeyError, TypeError, ValueError, AttributeError, OverflowError, OSError)


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One chunk or one client event of a log, with its wall-clock time (None for plain captures)."""

    ts: datetime | None
    stream: StreamName | None = None
    data: bytes = b""
    event: dict[str, Any] | None = None


class RawLogWriter:
    """Appends records to a private raw log, secrets redacted, writes batched.  Never raises: a
    failure to open or write turns the log off and is kept in :attr:`failure`.

    ``redactor``: None for a log of the exact bytes.  ``screen``: every event reads the screen, so
    each writes what the streams hold before it.  ``private_dir``: the directory is ours (the
    default runs directory), tightened to 0700 even if it already exists.  ``opener`` opens the
    file (tests pass one that fails)."""

    def __init__(
        self,
        path: Path,
        header: dict[str, Any],
        *,
        redactor: Redactor | None = None,
        screen: bool = False,
        private_dir: bool = False,
        opener: Callable[[Path], IO[bytes]] | None = None,
        flush_bytes: int = FLUSH_BYTES,
        flush_seconds: float = FLUSH_SECONDS,
    ) -> None:
        self.path = path
        self.failure: str | None = None
        self.opened = False
        """Whether the file was opened (writing it may have failed since)."""
        self._reported = False
        self._redactor = redactor
        self._screen = screen
        self._streams = {s: StreamRedactor(redactor) for s in _STREAMS} if redactor else {}
        self._last_ts = dict.fromkeys(_STREAMS, 0.0)
        # Records as encoded, written together by one writev: gathering them in one buffer first
        # cost a copy of every byte (1-1.4 ms of a 6.7 MB run).
        self._buf: list[bytes] = []
        self._buffered = 0
        self._flush_bytes = flush_bytes
        self._flush_seconds = flush_seconds
        self._flushed_at = time.monotonic()
        self._file: IO[bytes] | None = None
        try:
            self._file = opener(path) if opener else open_private(path, private_dir=private_dir)
        except OSError as exc:
            self._fail("could not be opened", exc)
            return
        self.opened = True
        self._write({"type": "header", "format": FORMAT, "version": VERSION, **self._scrubbed(header)})

    def chunk(self, stream: StreamName, data: bytes, ts: float) -> None:
        if self._file is None:
            return
        ours = self._streams.get("stdin")
        if stream != "stdin" and ours is not None and ours.holding:
            # What we wrote without a newline (a prompt on stdin) is whole as written, and what the
            # agent prints next answers it: it goes first, or a replay shows the answer before it.
            self._chunk("stdin", ours.flush(), self._last_ts["stdin"])
        held = self._streams.get(stream)
        if held is not None:
            self._last_ts[stream] = ts
            data = held.feed(data)
            if not data:
                return
        self._chunk(stream, data, ts)

    def event(self, event: dict[str, Any], ts: float) -> None:
        if self._file is None:
            return
        if self._screen or event.get("type") in _CUTTING_EVENTS:
            self._release()
        self._write({"type": "event", "ts": ts, "event": self._scrubbed(event)})

    def flush(self) -> None:
        """Write what is batched (not a partial line: it waits for its end)."""
        if self._file is None or not self._buf:
            return
        batch, self._buf, self._buffered = self._buf, [], 0
        self._flushed_at = time.monotonic()
        try:
            _write_all(self._file, batch)
        except (OSError, ValueError) as exc:
            self._fail("could not be written", exc)

    def close(self) -> None:
        """Write everything, partial lines included, and close the file."""
        if self._file is None:
            return
        self._release()
        self.flush()
        if self._file is None:
            return
        try:
            self._file.close()
        except OSError as exc:
            self._fail("could not be closed", exc)
        self._file = None

    def take_failure(self) -> str | None:
        """The failure, once: the first call after it happened returns it, later ones None."""
        if self.failure is None or self._reported:
            return None
        self._reported = True
        return self.failure

    def _chunk(self, stream: StreamName, data: bytes, ts: float) -> None:
        rec: dict[str, Any] = {"type": "chunk", "ts": ts, "stream": stream}
        try:
            rec["data"] = data.decode("utf-8")
        except UnicodeDecodeError:
            rec["b64"] = base64.b64encode(data).decode("ascii")
        self._write(rec)

    def _release(self) -> None:
        # Partial lines go out now: what follows may depend on them.
        for stream, held in self._streams.items():
            if held.holding:
                self._chunk(stream, held.flush(), self._last_ts[stream])

    def _scrubbed(self, value: dict[str, Any]) -> dict[str, Any]:
        return value if self._redactor is None else dict(self._redactor.scrub_value(value))

    def _write(self, rec: dict[str, Any]) -> None:
        line = orjson.dumps(rec, default=str, option=orjson.OPT_APPEND_NEWLINE)
        self._buf.append(line)
        self._buffered += len(line)
        if self._buffered >= self._flush_bytes or time.monotonic() - self._flushed_at >= self._flush_seconds:
            self.flush()

    def _fail(self, what: str, exc: BaseException) -> None:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        self.failure = f"the raw log {self.path} {what} ({reason}); the run goes on without it"
        self._buf.clear()
        self._buffered = 0
        self._streams.clear()
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError, ValueError):  # the first error is the one to report
                file.close()


def open_private(path: Path, *, private_dir: bool = False) -> IO[bytes]:
    """``path`` opened for writing, truncated, mode 0600 whatever the umask, never through a
    symlink; the directories it needs are made 0700.  A FIFO or a device is opened as it is (and
    left its mode): ``--record /dev/stdout`` works."""
    make_private_dirs(path.parent, tighten=private_dir)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    fd = os.open(path, flags, 0o600)  # O_NONBLOCK: a FIFO with no reader fails instead of hanging
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.fchmod(fd, 0o600)  # an existing file keeps its mode on open; the umask may widen none
        os.set_blocking(fd, True)
        return os.fdopen(fd, "wb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def make_private_dirs(directory: Path, *, tighten: bool = False) -> None:
    """Make ``directory`` and its missing parents with mode 0700 (set after mkdir, so the umask
    cannot leave them open).  ``tighten``: an existing ``directory`` of ours is set to 0700 too."""
    missing: list[Path] = []
    here = directory
    while not here.exists() and here != here.parent:
        missing.append(here)
        here = here.parent
    for d in reversed(missing):
        try:
            d.mkdir(0o700)
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs to set
        d.chmod(0o700)
    if tighten:
        st = os.lstat(directory)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
            directory.chmod(0o700)


def _write_all(file: IO[bytes], parts: list[bytes]) -> None:
    try:
        fd = file.fileno()
    except (OSError, ValueError):  # not a file of the system's (a test's stand-in): one write
        fd = -1
    if fd < 0:
        _write_view(file, memoryview(b"".join(parts)))
        return
    pending: list[bytes | memoryview] = list(parts)
    while pending:
        n = os.writev(fd, pending[:_IOV_MAX])
        if n <= 0:
            raise OSError(28, "nothing was written")
        # Drop what went out; a record cut by a short write goes on from where it stopped.
        done = 0
        while done < len(pending) and n >= len(pending[done]):
            n -= len(pending[done])
            done += 1
        del pending[:done]
        if n:
            pending[0] = memoryview(pending[0])[n:]


def _write_view(file: IO[bytes], view: memoryview) -> None:
    while view:
        n = file.write(view)
        if n is None or n <= 0:  # a non-blocking file that took nothing: treat as full
            raise OSError(28, "nothing was written")
        view = view[n:]


def read_raw_log(path: Path) -> tuple[dict[str, Any] | None, Iterator[RawRecord]]:
    """The header (None for a plain capture) and the records of ``path``, in order."""
    try:
        with path.open("rb") as f:
            first = f.readline()
    except OSError as exc:
        raise RawLogError(f"cannot read {path}: {exc.strerror or exc}") from exc
    header = _header(first)
    if header is not None:
        return header, _records(path)
    if first.lstrip().startswith(b"{") and FORMAT.encode() in first:
        # Our header, damaged: still our log, read as one (a capture it is not).
        damaged = _damaged(path, 1, first, ValueError("not a valid header"))
        return {"type": "header", "format": FORMAT}, itertools.chain([damaged], _records(path))
    return None, _plain(path)


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
                yield _record(orjson.loads(line))
            except _UNREADABLE as exc:
                yield _damaged(path, n, line, exc)


def _damaged(path: Path, n: int, line: bytes, exc: Exception) -> RawRecord:
    # A crash mid-write leaves a last line with no newline; anything else is damage.
    what = "is cut short" if not line.endswith(b"\n") else "is not a raw log record"
    shown = line.decode("utf-8", "replace").strip()
    message = f"{path.name}:{n} {what} ({exc}); it was skipped: {shown[:_SHOWN]}"
    event = {"type": "run_error", "code": DAMAGED, "message": message, "line_number": n}
    return RawRecord(ts=None, event=event)


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
