"""JSON lines on the wire, sans-I/O: every line protocol we speak (Claude's stream-json, JSONL,
JSON-RPC 2.0 over stdio) is one JSON value per line.  :class:`JsonLinesWire` frames each stream's
bytes into lines and parses each line exactly once into a :class:`WireLine`; the peer (which
answers the agent) and the normalizer (which makes the entries) both read that same event, so a
line is never cut or parsed twice, and a replay of the raw log goes through the very same code as
the live run did.

No I/O, no clock: the timestamp comes in with the bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal, NamedTuple

import orjson

from .framing import DEFAULT_MAX_LINE_BYTES, LineFramer, LineTooLong, RawLine, decode

__all__ = [
    "NOT_JSON",
    "JsonLinesWire",
    "LineDropped",
    "Stream",
    "WireEvent",
    "WireLine",
    "parse_line",
]

Stream = Literal["stdout", "stderr", "stdin"]
STREAMS: tuple[Stream, ...] = ("stdout", "stderr", "stdin")


class _NotJson:
    """The value of a line that is not JSON (JSON's own null is None, so this is not)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_JSON"

    def __bool__(self) -> bool:
        return False


NOT_JSON: Any = _NotJson()


class WireLine(NamedTuple):
    """One complete line of one stream, parsed once.  (A named tuple: one is made per line, and a
    tuple is the cheapest immutable record Python builds.)"""

    raw: bytes
    """The line's bytes, without its line end."""
    value: Any
    """Its JSON value, or :data:`NOT_JSON` (see :attr:`error`)."""
    object: dict[str, Any] | None
    """The same value when it is a JSON object, else None: what every protocol here wants (a
    field, not a property: it is read once per line by every normalizer)."""
    stream: Stream
    ts: datetime | None
    error: str | None = None
    """Why :attr:`value` is :data:`NOT_JSON`: not JSON at all, or not an object or array."""

    @property
    def text(self) -> str:
        """The line as text (invalid UTF-8 replaced), decoded when asked: only a line shown as
        it is (an error entry, a CLI's plain output) needs it, and decoding every line would cost
        a pass over every byte."""
        return decode(self.raw)


class LineDropped(NamedTuple):
    """A line longer than the limit: dropped as it streamed (memory stays bounded), reported with
    its length in bytes and its first bytes, decoded."""

    length: int
    head: str
    stream: Stream
    ts: datetime | None


WireEvent = WireLine | LineDropped

_loads = orjson.loads
_DecodeError = orjson.JSONDecodeError
_new = tuple.__new__  # (a named tuple's own __new__ is a Python function: one call more per line)


def parse_line(line: str | bytes, stream: Stream = "stdout", ts: datetime | None = None) -> WireLine:
    """One line (without its end) as a wire event.

    Only a line that opens an object or an array is parsed: no protocol here has any other kind
    of line, and a parse that fails costs an exception, which a stream of plain text (stderr, a
    CLI's banner) should not pay per line."""
    raw = line if type(line) is bytes else str(line).encode("utf-8", "surrogatepass")
    first = raw[:1]
    if first != b"{" and first != b"[":
        first = raw.lstrip()[:1]
        if first != b"{" and first != b"[":
            return _new(WireLine, (raw, NOT_JSON, None, stream, ts, "not a JSON object"))
    try:
        value = _loads(raw)
    except _DecodeError:
        return _not_utf8(raw, stream, ts)
    return _new(WireLine, (raw, value, value if type(value) is dict else None, stream, ts, None))


def _not_utf8(raw: bytes, stream: Stream, ts: datetime | None) -> WireLine:
    """A line the parser refused: read again as its text, invalid UTF-8 replaced (the parser takes
    only valid UTF-8; the line's text is what every reader sees of it), else not JSON at all."""
    if not raw.isascii():
        try:
            value = _loads(decode(raw))
        except _DecodeError:
            pass
        else:
            return _new(WireLine, (raw, value, value if type(value) is dict else None, stream, ts, None))
    return _new(WireLine, (raw, NOT_JSON, None, stream, ts, "not JSON"))


class JsonLinesWire:
    """Frames each stream's chunks into lines and parses each line once.

    The same chunks give the same events wherever their boundaries fall (the framer waits for a
    line's end; see :mod:`.framing`).  ``stderr`` lines are framed but not parsed: every
    protocol's stderr is the CLI's free text."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self.max_line_bytes = max_line_bytes
        # Made on a stream's first bytes: most runs use one or two of the three, and a short run's
        # normalizer is made and finished often (codex exec's captures average five lines a run).
        self._framers: dict[Stream, LineFramer] = {}

    def feed(self, data: bytes, stream: Stream, ts: datetime | None) -> Iterator[WireEvent]:
        """The lines ``data`` completes on ``stream``, in order.  The lines are cut at once; each
        is parsed as it is taken from the iterator, so a consumer that handles one line before it
        takes the next holds one line's parse at a time, not a chunk's (which would keep
        thousands of young objects alive and make the garbage collector's passes dearer)."""
        framer = self._framers.get(stream)
        if framer is None:
            framer = self._framers[stream] = LineFramer(self.max_line_bytes)
        return self._events(framer.feed_raw(data), stream, ts)

    def finish(self, ts: datetime | None) -> list[WireEvent]:
        """The end of every stream (or of one process, when another takes over): a last line with
        no line end, per stream in the order stdout, stderr, stdin.  (A list, made only for a
        stream with such a line: a run of codex exec or Cursor is a few lines, and most end with
        nothing left, so this is called once per run for nothing.)"""
        out: list[WireEvent] = []
        framers = self._framers
        if framers:
            for stream in STREAMS:
                framer = framers.get(stream)
                if framer is not None:
                    lines = framer.finish_raw()
                    if lines:
                        out.extend(self._events(lines, stream, ts))
        return out

    @staticmethod
    def _events(lines: list[RawLine], stream: Stream, ts: datetime | None) -> Iterator[WireEvent]:
        if stream == "stderr":
            for line in lines:
                if type(line) is bytes:
                    yield _new(WireLine, (line, NOT_JSON, None, stream, ts, "not parsed"))
                else:
                    assert isinstance(line, LineTooLong)
                    yield LineDropped(line.length, line.head, stream, ts)
            return
        for line in lines:  # (parse_line inlined for the common line: this loop runs per line)
            if type(line) is bytes and line[0] == 123:  # (b"{")
                try:
                    value = _loads(line)
                except _DecodeError:
                    yield _not_utf8(line, stream, ts)
                    continue
                yield _new(WireLine, (line, value, value if type(value) is dict else None, stream, ts, None))
            elif isinstance(line, LineTooLong):
                yield LineDropped(line.length, line.head, stream, ts)
            else:
                yield parse_line(line, stream, ts)
