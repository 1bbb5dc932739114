"""What every normalizer is, and the index-addressed entry log they all build on."""

from __future__ import annotations

import abc
from datetime import datetime
from typing import Any, Literal

from ..entries import (
    EntryMetadata,
    EntryPatch,
    EntryType,
    ErrorEntry,
    ErrorInfo,
    NormalizedEntry,
    SystemMessage,
)
from .framing import DEFAULT_MAX_LINE_BYTES, FramedLine, LineFramer, LineTooLong

__all__ = ["EntryLog", "LineNormalizer", "Normalizer", "Stream"]

Stream = Literal["stdout", "stderr", "stdin"]


class EntryLog:
    """Owns entry indexes: adds entries, replaces them in place, and returns the patches."""

    def __init__(self) -> None:
        self.entries: list[NormalizedEntry] = []
        self.session_id: str | None = None
        self.model: str | None = None

    def metadata(self, **extra: Any) -> EntryMetadata:
        return EntryMetadata(session_id=self.session_id, model=self.model, extra=extra or None)

    def add(
        self, type_: EntryType, content: str = "", ts: datetime | None = None, **extra: Any
    ) -> EntryPatch:
        entry = NormalizedEntry(
            index=len(self.entries),
            timestamp=ts,
            type=type_,
            content=content,
            metadata=self.metadata(**extra),
        )
        self.entries.append(entry)
        return EntryPatch(op="add", index=entry.index, entry=entry)

    def replace(self, index: int, **changes: Any) -> EntryPatch:
        entry = self.entries[index].model_copy(update=changes)
        self.entries[index] = entry
        return EntryPatch(op="replace", index=index, entry=entry)

    def error(
        self, message: str, code: str, ts: datetime | None = None, content: str | None = None, **extra: Any
    ) -> EntryPatch:
        info = ErrorInfo(message=message, code=code)
        return self.add(ErrorEntry(error=info), content if content is not None else message, ts, **extra)


class Normalizer(abc.ABC):
    """A sans-I/O state machine: bytes of one run in, entry patches out.

    ``feed`` is called with each chunk in the order it crossed the pipes (``stdin`` chunks are what
    the client wrote).  Output never depends on where chunk boundaries fall.  No I/O, no clock:
    timestamps come in with the chunks.
    """

    log: EntryLog

    @abc.abstractmethod
    def feed(self, chunk: bytes, stream: Stream = "stdout", ts: datetime | None = None) -> list[EntryPatch]:
        """Consume one chunk; return the patches it produced."""

    @abc.abstractmethod
    def finish(self, ts: datetime | None = None) -> list[EntryPatch]:
        """End of the run: flush partial lines and close what is still open."""

    def note(self, event: dict[str, Any], ts: datetime | None = None) -> list[EntryPatch]:
        """A decision or finding of the client's, recorded in the raw log as an event.

        Shared kinds: ``run_error`` (the run's own verdict: timeout, the process died ...) becomes an
        error entry; ``restart`` (a new process continues the run) flushes partial lines."""
        match event.get("type"):
            case "run_error":
                return [
                    self.log.error(
                        str(event.get("message")),
                        str(event.get("code")),
                        ts,
                        stderr_tail=event.get("stderr_tail"),
                    )
                ]
            case "restart":
                return self.restart(str(event.get("reason") or "restarting the agent"), ts)
        return []

    def restart(self, reason: str, ts: datetime | None) -> list[EntryPatch]:
        return [self.log.add(SystemMessage(), reason, ts)]

    @property
    def outcome(self) -> Literal["success", "failed", "interrupted"] | None:
        """How the last turn ended, as the agent reported it; None if it never said."""
        return None

    @property
    def entries(self) -> list[NormalizedEntry]:
        return self.log.entries


class LineNormalizer(Normalizer):
    """A normalizer for a line protocol: one framer per stream, one handler per line."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.log = EntryLog()
        self._framers = {s: LineFramer(max_line_bytes) for s in ("stdout", "stderr", "stdin")}

    def feed(self, chunk: bytes, stream: Stream = "stdout", ts: datetime | None = None) -> list[EntryPatch]:
        return self._lines(self._framers[stream].feed(chunk), stream, ts)

    def finish(self, ts: datetime | None = None) -> list[EntryPatch]:
        out: list[EntryPatch] = []
        for stream, framer in self._framers.items():
            out += self._lines(framer.finish(), stream, ts)  # type: ignore[arg-type]
        return out + self.close(ts)

    def _lines(self, lines: list[FramedLine], stream: Stream, ts: datetime | None) -> list[EntryPatch]:
        out: list[EntryPatch] = []
        for line in lines:
            if isinstance(line, LineTooLong):
                if stream == "stdout":
                    out.append(
                        self.log.error(
                            f"{stream} line of {line.length} bytes exceeds the limit and was dropped",
                            "line_too_long",
                            ts,
                            content=line.head,
                        )
                    )
                continue
            out += self.feed_line(line, stream, ts)
        return out

    @abc.abstractmethod
    def feed_line(self, line: str, stream: Stream, ts: datetime | None) -> list[EntryPatch]:
        """Handle one complete line of ``stream``."""

    def close(self, ts: datetime | None) -> list[EntryPatch]:
        """Called once by :meth:`finish` after the last line."""
        return []

    def restart(self, reason: str, ts: datetime | None) -> list[EntryPatch]:
        # A partial line of the old process must not be glued to the new one's first line.
        out: list[EntryPatch] = []
        for stream, framer in self._framers.items():
            out += self._lines(framer.finish(), stream, ts)  # type: ignore[arg-type]
        return out + super().restart(reason, ts)
