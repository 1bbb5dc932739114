"""One line framer for every line-based protocol (stream-json, JSON-RPC over stdio, JSONL).

Bytes arrive in chunks split anywhere.  We split on ``\\n`` *before* decoding: 0x0A never occurs
inside a multi-byte UTF-8 sequence, so a character cut across two chunks simply waits in the buffer
until its line is complete, and each complete line is decoded once with invalid bytes replaced
(never fatal).  ``\\r\\n`` endings lose their ``\\r``; a last line with no newline is delivered by
:meth:`LineFramer.finish`.  A line longer than ``max_line_bytes`` is dropped as it streams (memory
stays bounded) and reported as :class:`LineTooLong`; the lines after it are unaffected.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_LINE_BYTES", "FramedLine", "LineFramer", "LineTooLong"]

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
_HEAD_BYTES = 256


@dataclass(frozen=True, slots=True)
class LineTooLong:
    """A line that exceeded the limit: its full length in bytes and its first bytes, decoded."""

    length: int
    head: str


FramedLine = str | LineTooLong


class LineFramer:
    """Turns byte chunks into complete, decoded lines.  Pure: no I/O, no clock."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self._max = max_line_bytes
        self._buf = bytearray()
        # Where to resume looking for b"\n": avoids rescanning a long partial line on every chunk.
        self._scan_from = 0
        # While > 0 we are inside an over-long line whose bytes are being discarded.
        self._dropped = 0
        self._dropped_head = b""

    def feed(self, chunk: bytes) -> list[FramedLine]:
        """Add bytes; return the lines they completed, in order."""
        out: list[FramedLine] = []
        self._buf += chunk
        while True:
            nl = self._buf.find(b"\n", self._scan_from)
            if nl < 0:
                self._scan_from = len(self._buf)
                self._guard_length()
                return out
            self._emit(bytes(self._buf[:nl]), out)
            del self._buf[: nl + 1]
            self._scan_from = 0

    def finish(self) -> list[FramedLine]:
        """End of stream: deliver a final line that had no newline."""
        out: list[FramedLine] = []
        if self._buf or self._dropped:
            self._emit(bytes(self._buf), out)
        self._buf.clear()
        self._scan_from = 0
        return out

    def _guard_length(self) -> None:
        if len(self._buf) <= self._max:
            return
        if not self._dropped:
            self._dropped_head = bytes(self._buf[:_HEAD_BYTES])
        self._dropped += len(self._buf)
        self._buf.clear()
        self._scan_from = 0

    def _emit(self, raw: bytes, out: list[FramedLine]) -> None:
        if self._dropped or len(raw) > self._max:
            head = self._dropped_head if self._dropped else raw[:_HEAD_BYTES]
            out.append(LineTooLong(self._dropped + len(raw), head.decode("utf-8", "replace")))
            self._dropped = 0
            self._dropped_head = b""
            return
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if raw.strip():
            out.append(raw.decode("utf-8", "replace"))
