"""One line framer for every line-based protocol (stream-json, JSON-RPC over stdio, JSONL).

Bytes arrive in chunks split anywhere.  We split on ``\\n`` *before* decoding: 0x0A never occurs
inside a multi-byte UTF-8 sequence, so a character cut across two chunks simply waits in the buffer
until its line is complete.  :meth:`LineFramer.feed_raw` hands out each complete line as bytes (the
wire parses JSON from the bytes and decodes a line's text only if someone reads it: decoding is
a pass over every byte, and a chunk with one non-ASCII character would decode into a wide string
that costs as much again to parse); :meth:`LineFramer.feed` decodes each line, invalid bytes
replaced (never fatal).  ``\\r\\n`` endings lose their ``\\r``; a last line with no newline is delivered by
:meth:`LineFramer.finish`.  A line longer than ``max_line_bytes`` is dropped as it streams (memory
stays bounded) and reported as :class:`LineTooLong`; the lines after it are unaffected.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_LINE_BYTES", "FramedLine", "LineFramer", "LineTooLong", "RawLine", "decode"]

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
_HEAD_BYTES = 256


@dataclass(frozen=True, slots=True)
class LineTooLong:
    """A line that exceeded the limit: its full length in bytes and its first bytes, decoded."""

    length: int
    head: str


FramedLine = str | LineTooLong
RawLine = bytes | LineTooLong


class LineFramer:
    """Turns byte chunks into complete lines.  Pure: no I/O, no clock."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self._max = max_line_bytes
        self._buf = bytearray()  # the partial line after the last newline
        # While > 0 we are inside an over-long line whose bytes are being discarded.
        self._dropped = 0
        self._dropped_head = b""

    def feed(self, chunk: bytes) -> list[FramedLine]:
        """Add bytes; return the lines they completed, in order, decoded."""
        return [decode(line) if isinstance(line, bytes) else line for line in self.feed_raw(chunk)]

    def finish(self) -> list[FramedLine]:
        """End of stream: deliver a final line that had no newline, decoded."""
        return [decode(line) if isinstance(line, bytes) else line for line in self.finish_raw()]

    def feed_raw(self, chunk: bytes) -> list[RawLine]:
        """Add bytes; return the lines they completed, in order, as bytes."""
        last = chunk.rfind(b"\n")
        if last < 0:
            self._buf += chunk
            self._guard_length()
            return []
        # Everything up to the last newline is whole lines: cut them in one pass (a C loop, not a
        # Python one per line); the rest waits in the buffer.
        size = len(self._buf) + last
        if self._buf or self._dropped:
            self._buf += chunk[:last]
            parts = bytes(self._buf).split(b"\n")
            self._buf.clear()
        else:
            parts = chunk.split(b"\n")
            parts.pop()  # (the bytes after the last newline: kept below)
        self._buf += chunk[last + 1 :]
        out: list[RawLine] = []
        if self._dropped or size > self._max:
            for raw in parts:
                self._emit(raw, out)
        else:
            _lines(parts, out)
        self._guard_length()
        return out

    def finish_raw(self) -> list[RawLine]:
        """End of stream: deliver a final line that had no newline, as bytes."""
        out: list[RawLine] = []
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

    def _emit(self, raw: bytes, out: list[RawLine]) -> None:
        if self._dropped or len(raw) > self._max:
            head = self._dropped_head if self._dropped else raw[:_HEAD_BYTES]
            out.append(LineTooLong(self._dropped + len(raw), head.decode("utf-8", "replace")))
            self._dropped = 0
            self._dropped_head = b""
            return
        _lines([raw], out)


def decode(line: bytes) -> str:
    """A line's text: invalid UTF-8 replaced, never fatal.  Decoding a run of whole lines at once
    gives the same text as decoding each line: 0x0A never occurs inside a multi-byte UTF-8
    sequence, so no line boundary cuts one."""
    return line.decode("utf-8", "replace")


# What bytes.strip() strips: a line of only these is blank.  (Decoded, str.strip() would also
# strip Unicode spaces, which a line of the protocol may well consist of.)
_ASCII_SPACE = b" \t\n\r\x0b\x0c"


def _lines(lines: list[bytes], out: list[RawLine]) -> None:
    """The non-blank ones of ``lines``, each without its ``\\r``."""
    for line in lines:
        if line and line[-1] == 13:  # (b"\r")
            line = line[:-1]
        if line and (line[0] not in _ASCII_SPACE or line.strip()):
            out.append(line)
