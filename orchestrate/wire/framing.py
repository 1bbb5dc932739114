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
        self._buf = bytearray()  # the partial line after the last newline
        # While > 0 we are inside an over-long line whose bytes are being discarded.
        self._dropped = 0
        self._dropped_head = b""

    def feed(self, chunk: bytes) -> list[FramedLine]:
        """Add bytes; return the lines they completed, in order."""
        last = chunk.rfind(b"\n")
        if last < 0:
            self._buf += chunk
            self._guard_length()
            return []
        # Everything up to the last newline is whole lines: cut and decode them in one pass each
        # (a C loop, not a Python one per line); the rest waits in the buffer.
        view = memoryview(chunk)
        if self._buf or self._dropped:
            self._buf += view[:last]
            complete: bytes | memoryview = bytes(self._buf)
            self._buf.clear()
        else:
            complete = view[:last]
        self._buf += view[last + 1 :]
        out: list[FramedLine] = []
        if self._dropped or len(complete) > self._max:
            for raw in bytes(complete).split(b"\n"):
                self._emit(raw, out)
        else:
            _decoded_lines(str(complete, "utf-8", "replace"), out)
        self._guard_length()
        return out

    def finish(self) -> list[FramedLine]:
        """End of stream: deliver a final line that had no newline."""
        out: list[FramedLine] = []
        if self._buf or self._dropped:
            self._emit(bytes(self._buf), out)
        self._buf.clear()
        return out

    def _guard_length(self) -> None:
        if len(self._buf) <= self._max:
            return
        if not self._dropped:
            self._dropped_head = bytes(self._buf[:_HEAD_BYTES])
        self._dropped += len(self._buf)
        self._buf.clear()

    def _emit(self, raw: bytes, out: list[FramedLine]) -> None:
        if self._dropped or len(raw) > self._max:
            head = self._dropped_head if self._dropped else raw[:_HEAD_BYTES]
            out.append(LineTooLong(self._dropped + len(raw), head.decode("utf-8", "replace")))
            self._dropped = 0
            self._dropped_head = b""
            return
        _decoded_lines(raw.decode("utf-8", "replace"), out)


# What bytes.strip() strips: a line of only these is blank.  (str.strip() would also strip
# Unicode spaces, which a line of the protocol may well consist of.)
_ASCII_SPACE = " \t\n\r\x0b\x0c"


def _decoded_lines(text: str, out: list[FramedLine]) -> None:
    """The non-blank lines of ``text`` (already decoded), each without its ``\\r``.

    Decoding a run of whole lines at once gives the same text as decoding each line: 0x0A never
    occurs inside a multi-byte UTF-8 sequence, so no line boundary cuts one."""
    for line in text.split("\n"):
        if line and line[-1] == "\r":
            line = line[:-1]
        if line and (line[0] not in _ASCII_SPACE or line.strip(_ASCII_SPACE)):
            out.append(line)
