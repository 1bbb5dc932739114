"""What every normalizer is, and the index-addressed entry log they all build on."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, ClassVar, Literal

import orjson

from ..entries import _CAMEL as _CAMEL_KEYS
from ..entries import (
    EntryMetadata,
    EntryPatch,
    EntryType,
    ErrorEntry,
    ErrorInfo,
    NormalizedEntry,
    SystemMessage,
    ToolStatus,
    ToolUse,
    ToolUseEntry,
    camel_key,
)
from ..wire.framing import DEFAULT_MAX_LINE_BYTES
from ..wire.lines import JsonLinesWire, LineDropped, Stream, WireEvent, WireLine
from ..wire.notes import Note, Restart, RunError, parse_note
from .built import error_entry
from .compiled import mypyc_attr
from .evolve import _new, _set_dict, _set_extra, _set_fields_set, _set_private, evolve, evolve_with
from .shape import PLAIN_ACTIONS, shape_action, shape_content, shape_tool
from .text import TextBuffer

__all__ = [
    "DEFAULT_WINDOW",
    "MAX_PROTOCOL_ERRORS",
    "OPEN_STATUSES",
    "SHARED_NOTES",
    "SHOWN_LINE_CHARS",
    "EntryLog",
    "EntryReleased",
    "LineNormalizer",
    "Normalizer",
    "Stream",
]

SHARED_NOTES = frozenset((RunError.kind, Restart.kind))
"""The kinds of note :meth:`Normalizer.on_note` itself acts on."""
TurnStatus = str  # "completed", "interrupted", "failed", or the agent's own word for a failure
OPEN_STATUSES: frozenset[ToolStatus] = frozenset({"created", "pending_approval", "running"})
SHOWN_LINE_CHARS = 2048
"""How much of an offending line a protocol error shows; the raw log keeps the whole of it."""
MAX_PROTOCOL_ERRORS = 1000
"""Protocol error entries a run shows one by one; the ones after are counted in a single summary
entry, so a million garbage lines cost one entry, not a million."""
DEFAULT_WINDOW = 256
"""Entries a bounded log (:meth:`EntryLog.bound`) keeps besides the tool calls still open."""


class EntryReleased(LookupError):
    """A line changes an entry that a bounded log has already let go of."""

    def __init__(self, index: int) -> None:
        super().__init__(f"entry {index} was released")
        self.index = index


_METADATA_FIELDS = {"session_id", "model", "extra"}


def _shared_metadata(
    session_id: str | None, model: str | None, extra: dict[str, Any] | None = None
) -> EntryMetadata:
    """The shared metadata of entries with no ``extra`` keys (made again when the session's id or
    model changes, twice in most runs), or an entry's own with its keys: as :func:`_patch`."""
    new = _new(EntryMetadata)
    _set_dict(new, {"session_id": session_id, "model": model, "extra": extra})
    _set_fields_set(new, _METADATA_FIELDS)
    _set_extra(new, None)
    _set_private(new, None)
    return new


_NO_SESSION = _shared_metadata(None, None)
"""The metadata of entries made before the agent names its session and model (a prompt, a first
line): one for every log (frozen), not one made per run."""


class EntryLog:
    """Owns entry indexes.  Entries are added and changed in place; :meth:`drain` hands out the
    patches since the last drain, one per touched entry, in the order they were first touched.

    Changes are kept pending until an entry is read or drained, so a hundred text deltas that
    arrive in one chunk cost one copy of the entry, not a hundred; streamed text is kept as pieces
    (:meth:`append_text`) and joined once per drain, so a long answer costs time linear in its
    length.  The tool calls still open are indexed, so closing them does not scan every entry.
    """

    # Scalars start at the class's value and become the instance's on their first change: a log
    # is made per run, and codex exec's and Cursor's captures are thousands of runs of a few lines
    # each, where every attribute set here is paid again (so are the bounded mode's tables, made
    # by :meth:`bound` and :meth:`track` when used).
    _count = 0
    _metadata: EntryMetadata = _NO_SESSION  # shared by every entry with no extra keys
    session_id: str | None = None
    model: str | None = None
    work_dir: str | None = None
    """The task's working directory: tool paths inside it are shown relative to it (shape.py)."""
    _protocol_errors = 0  # shown one by one so far
    # The entry counting those past the cap: its index, the count, and the count it shows (it is
    # rebuilt when read, not once per garbage line).
    _protocol_summary: tuple[int, int] | None = None
    _summary_shown = 0
    # Bounded mode (see :meth:`bound`); None keeps every entry.
    _window: int | None = None
    _low = 0  # every index below this one was released, or is held while its tool is open
    _held: set[int]  # ... those held (made by :meth:`bound`)
    _settled: list[int]  # held ones whose tool closed since the last drain (made by :meth:`bound`)
    _released = 0  # since the tables were last swept
    _on_release: Callable[[NormalizedEntry], None] | None = None  # told of each entry let go of
    _shaped_below = 0  # tool entries below this index were shaped for an earlier work_dir
    _tables: tuple[tuple[dict[Any, Any], Callable[[Any], bool] | None], ...] = ()
    _sweep_hooks: tuple[Callable[[], None], ...] = ()

    def __init__(self) -> None:
        # A dict, not a list: a bounded log lets old entries go and their indexes stay reserved.
        self._entries: dict[int, NormalizedEntry] = {}
        self._pending: dict[int, dict[str, Any]] = {}
        self._touched: dict[int, Literal["add", "replace"]] = {}
        self._texts: dict[int, TextBuffer] = {}  # entries whose content streams in pieces
        self._grown: set[int] = set()  # ... and got pieces not yet in the entry
        self._open_tools: dict[int, None] = {}  # tool calls created, pending approval or running
        self._refresh: dict[int, Callable[[], None]] = {}  # updates due before the entry is read

    def bound(self, window: int = DEFAULT_WINDOW) -> None:
        """Keep memory flat however long the run: after each drain, let go of every entry but the
        last ``window`` ones and the tool calls still open (their indexes stay reserved, so
        patches stay index-addressed), and of the normalizer's per-id rows that point at them
        (:meth:`track`).  For a consumer that streams the patches and keeps them itself.

        A later line that changes a released entry becomes an ``entry_released`` error entry
        (see :class:`EntryReleased`); one that names a forgotten id starts a fresh entry.  Once
        bound, :attr:`entries` holds only the entries kept (see :meth:`on_release` for a caller
        that needs a figure of them all)."""
        if window < 1:
            raise ValueError("window must be positive")
        if self._window is None:
            self._held, self._settled = set(), []
        self._window = window

    def on_release(self, hook: Callable[[NormalizedEntry], None] | None) -> None:
        """Have a bounded log call ``hook`` with each entry as it lets it go, in its last state
        (an entry let go of never changes again): in index order, but for the tool calls held
        while open, which go when they close.  What it has not let go of is in :attr:`entries`
        at the end: the two together are every entry of the run, each once."""
        self._on_release = hook

    def track(self, table: dict[Any, Any], alive: Callable[[Any], bool] | None = None) -> None:
        """A normalizer's table whose values are entry indexes (or, with ``alive``, hold them):
        in a bounded log the rows of released entries are dropped from time to time."""
        self._tables = (*self._tables, (table, alive))

    def after_sweep(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` after a bounded log dropped the rows of released entries, to trim the
        normalizer's tables that hang off those rows."""
        self._sweep_hooks = (*self._sweep_hooks, hook)

    def __contains__(self, index: object) -> bool:
        """Whether the log still holds entry ``index`` (always, unless bounded)."""
        return index in self._entries

    @property
    def entries(self) -> list[NormalizedEntry]:
        self._show_summary()
        self._materialize_all()
        return list(self._entries.values())

    def __len__(self) -> int:
        return self._count

    def metadata(self, **extra: Any) -> EntryMetadata:
        """The metadata of a new entry: the session's id and model, and ``extra`` keys (camelCase in
        the JSON form, as the seed's metadata spells its keys; a None value is left out)."""
        if extra:
            return self._extra_metadata(extra)
        meta = self._metadata
        if meta.session_id != self.session_id or meta.model != self.model:
            meta = self._metadata = _shared_metadata(self.session_id, self.model)
        return meta

    def _extra_metadata(self, extra: dict[str, Any]) -> EntryMetadata:
        """:meth:`metadata` with ``extra`` keys (the caller's own dict, not kept)."""
        camel = _CAMEL_KEYS  # (camel_key's answers, looked up here: a call less per key)
        keys = {}
        for k, v in extra.items():
            if v is not None:
                keys[camel.get(k) or camel_key(k)] = v
        if not keys:
            return self.metadata()
        # Built, not validated: the id and model are strings (the normalizers set them with
        # ``text``), the keys are camelCase already, and ``extra`` holds any value by design;
        # the constructor would only run its JSON-form hook and copy the dict.  (Not through
        # ``build``: its keywords were packed once more for every entry with keys.)
        return _shared_metadata(self.session_id, self.model, keys)

    def add(self, type_: EntryType, content: str = "", ts: datetime | None = None, **extra: Any) -> int:
        index = self._count
        self._count += 1
        meta = self._metadata  # (the shared one, checked here: a call less on every entry)
        if extra:
            meta = self._extra_metadata(extra)
        elif meta.session_id != self.session_id or meta.model != self.model:
            meta = self._metadata = _shared_metadata(self.session_id, self.model)
        # (``type(...) is``: a miss of isinstance against a pydantic class goes through its
        # metaclass's __instancecheck__, about 0.1 µs, on every entry; entry types have no subclasses)
        if type(type_) is ToolUse:
            if type(type_.tool.action) not in PLAIN_ACTIONS:  # (a command, say: nothing to shape)
                type_ = shape_tool(type_, self.work_dir)
                content = shape_content(content, type_, self.work_dir)
            if type_.tool.status in OPEN_STATUSES:  # (_track, for an index that is new)
                self._open_tools[index] = None
        self._entries[index] = _entry(index, ts, type_, content, meta)
        self._touched[index] = "add"
        return index

    def put(self, index: int | None, type_: EntryType, content: str, ts: datetime | None = None) -> int:
        """Add an entry, or, given the ``index`` of one added before, revise its type and content
        (a plan the agent updates in place); the entry's index either way."""
        if index is None or index not in self._entries:  # (a bounded log's released entry: anew)
            return self.add(type_, content, ts)
        self.replace(index, type=type_, content=content)
        return index

    def replace(self, index: int, **changes: Any) -> None:
        if self._window is not None and index not in self._entries:
            raise EntryReleased(index)
        if "content" in changes:
            self._texts.pop(index, None)
            self._grown.discard(index)
        if "type" in changes:
            new = changes["type"]
            if type(new) is ToolUse and type(new.tool.action) not in PLAIN_ACTIONS:
                changes["type"] = new = shape_tool(new, self.work_dir)
                if "content" in changes:
                    changes["content"] = shape_content(changes["content"], new, self.work_dir)
            self._track(index, new)
        self._pending.setdefault(index, {}).update(changes)
        self._touched.setdefault(index, "replace")

    def append_text(self, index: int, piece: str) -> None:
        """Add ``piece`` to the end of the entry's content."""
        if piece:
            buf = self._texts.get(index)  # (streamed's, inline: a call less per delta)
            if buf is None:
                buf = self.streamed(index)  # (raises EntryReleased before anything changes)
            buf.append(piece)
            self._grown.add(index)
            self._touched.setdefault(index, "replace")

    def refresh(self, index: int, update: Callable[[], None]) -> None:
        """Run ``update`` (which changes the entry) once, before the entry is next read or drained:
        an update that is costly to build (a command's whole output so far) runs once per batch of
        patches, not once per line.  A later ``update`` for the same entry replaces this one."""
        if self._window is not None and index not in self._entries:
            raise EntryReleased(index)
        self._refresh[index] = update
        self._touched.setdefault(index, "replace")

    def streamed(self, index: int) -> TextBuffer:
        """The entry's content as a :class:`TextBuffer`, to ask about without joining it."""
        buf = self._texts.get(index)
        if buf is None:
            buf = self._texts[index] = TextBuffer(self.get(index).content)
        return buf

    def get(self, index: int) -> NormalizedEntry:
        self._materialize(index)
        entry = self._entries.get(index)
        if entry is None:
            raise EntryReleased(index)
        return entry

    def tool(self, index: int) -> ToolUseEntry | None:
        """The tool call at ``index`` (None if that entry is not a tool call)."""
        t = self._type(index)
        return t.tool if type(t) is ToolUse else None

    def update_tool(self, index: int, content: str | None = None, **changes: Any) -> None:
        """Change fields of the tool call at ``index`` (and the entry's content, if given)."""
        t = self._type(index)
        assert type(t) is ToolUse, f"entry {index} is not a tool call"
        tool = t.tool
        if "action" in changes or index < self._shaped_below:
            # A new action (or one shaped for an earlier working directory) is shaped before the
            # call is copied, not after: one copy of the call and its entry type, not two.
            action = changes.get("action", tool.action)
            if type(action) not in PLAIN_ACTIONS:
                changes["action"] = shape_action(action, self.work_dir)
        # Else the action is the entry's, shaped when it was set, for the working directory of
        # now: not shaped again (a file edit's diffs would be walked once more per update).
        new = evolve(t, tool=evolve_with(tool, changes))
        pending = self._pending.get(index)
        if pending is None:
            pending = self._pending[index] = {}
        pending["type"] = new
        if content is not None:
            pending["content"] = shape_content(content, new, self.work_dir)
            self._texts.pop(index, None)
            self._grown.discard(index)
        self._track(index, new)
        self._touched.setdefault(index, "replace")

    def close_open_tools(self, status: ToolStatus) -> None:
        """Give every call still open (created, pending, running) ``status``; a question still
        pending on one of them is cancelled with it, never left pending."""
        if not self._open_tools:  # (the usual end of a run: nothing to sort)
            return
        for index in sorted(self._open_tools):
            tool = self.tool(index)
            approval = tool.approval if tool is not None else None
            if approval is not None and approval.decision == "pending":
                self.update_tool(index, status=status, approval=evolve(approval, decision="cancelled"))
            else:
                self.update_tool(index, status=status)

    def error(
        self, message: str, code: str, ts: datetime | None = None, content: str | None = None, **extra: Any
    ) -> int:
        if type(message) is str and type(code) is str:  # (as they should be: built, not validated)
            type_ = error_entry(message, code)
        else:
            type_ = ErrorEntry(error=ErrorInfo(message=message, code=code))
        return self.add(type_, content if content is not None else message, ts, **extra)

    def protocol_error(self, message: str, line: str, ts: datetime | None = None, **extra: Any) -> int:
        """A line (or message) that breaks the protocol: an error entry showing its first
        :data:`SHOWN_LINE_CHARS` characters.  Past :data:`MAX_PROTOCOL_ERRORS` such entries, one
        summary entry counts the rest, so a flood of garbage lines costs one entry, not one each."""
        if self._protocol_errors >= MAX_PROTOCOL_ERRORS:
            if self._protocol_summary is None or self._protocol_summary[0] not in self._entries:
                # (the first one past the cap; or a bounded log let the summary go: a new one)
                index = self.error(_summary_text(1), "protocol_error", ts)
                self._protocol_summary, self._summary_shown = (index, 1), 1
            else:
                index, count = self._protocol_summary
                self._protocol_summary = (index, count + 1)
                self._touched.setdefault(index, "replace")
            return index
        self._protocol_errors += 1
        shown = line if len(line) <= SHOWN_LINE_CHARS else line[:SHOWN_LINE_CHARS] + " [...]"
        if len(line) > SHOWN_LINE_CHARS:
            extra["line_length"] = len(line)
        return self.error(message, "protocol_error", ts, content=shown, **extra)

    def drain(self) -> list[EntryPatch]:
        """The patches since the last drain."""
        if self._protocol_summary is not None:
            self._show_summary()
        touched = self._touched
        if not touched:
            return []
        entries = self._entries
        pending, grown, refresh = self._pending, self._grown, self._refresh
        lazy = bool(pending or grown or refresh)  # else all are up to date
        out = []
        for index, op in touched.items():
            if lazy and (index in pending or index in grown or index in refresh):
                self._materialize(index)
            out.append(_patch(op, index, entries[index]))
        touched.clear()
        if self._window is not None:
            self._release(self._window)
        return out

    def _release(self, window: int) -> None:
        """Let go of what a bounded log no longer needs (called after a drain: nothing pending)."""
        entries, texts, held, open_tools = self._entries, self._texts, self._held, self._open_tools
        told = self._on_release
        released = 0
        limit = self._count - window
        for index in range(self._low, limit):
            if index in open_tools:
                held.add(index)
            else:
                gone = entries.pop(index, None)
                if told is not None and gone is not None:
                    told(gone)
                texts.pop(index, None)
                released += 1
        self._low = max(self._low, limit)
        for index in self._settled:
            if index in held and index not in open_tools:
                held.discard(index)
                gone = entries.pop(index, None)
                if told is not None and gone is not None:
                    told(gone)
                texts.pop(index, None)
                released += 1
        self._settled.clear()
        self._released += released
        if self._released >= window:  # swept once per ``window`` releases: linear overall
            self._sweep()

    def _sweep(self) -> None:
        entries = self._entries
        for table, alive in self._tables:
            if alive is None:
                dead = [key for key, index in table.items() if index not in entries]
            else:
                dead = [key for key, value in table.items() if not alive(value)]
            for key in dead:
                del table[key]
        for hook in self._sweep_hooks:
            hook()
        self._released = 0

    def _show_summary(self) -> None:
        """Bring the summary entry's count up to date: once per drain, not once per garbage line."""
        summary = self._protocol_summary
        if summary is not None and summary[1] != self._summary_shown:
            index, count = summary
            text = _summary_text(count)
            self.replace(
                index, type=ErrorEntry(error=ErrorInfo(message=text, code="protocol_error")), content=text
            )
            self._summary_shown = count

    def _type(self, index: int) -> EntryType:
        if index in self._refresh:
            self._refresh.pop(index)()
        changes = self._pending.get(index)
        if changes is not None and "type" in changes:
            return changes["type"]  # type: ignore[no-any-return]
        entry = self._entries.get(index)
        if entry is None:
            raise EntryReleased(index)
        return entry.type

    def _track(self, index: int, type_: EntryType) -> None:
        if type(type_) is ToolUse and type_.tool.status in OPEN_STATUSES:
            self._open_tools[index] = None
        elif index in self._open_tools:
            del self._open_tools[index]
            if index < self._low:  # held by a bounded log while open: let go at the next drain
                self._settled.append(index)

    def _materialize(self, index: int) -> None:
        if self._refresh and index in self._refresh:
            self._refresh.pop(index)()
        changes = self._pending.pop(index, None)
        if self._grown and index in self._grown:
            self._grown.discard(index)
            changes = changes or {}
            changes["content"] = self._texts[index].text()
        if changes:
            self._entries[index] = evolve_with(self._entries[index], changes)

    def _materialize_all(self) -> None:
        for index in [*self._refresh, *self._pending, *self._grown]:
            self._materialize(index)


@mypyc_attr(allow_interpreted_subclasses=True)
class Normalizer(abc.ABC):
    """A sans-I/O state machine: bytes of one run in, entry patches out.

    ``feed`` is called with each chunk in the order it crossed the pipes (``stdin`` chunks are what
    the client wrote).  The entries never depend on where chunk boundaries fall; the patches are
    one per entry touched by the chunk.  No I/O, no clock: timestamps come in with the chunks.
    """

    log: EntryLog
    strict = False
    """Let an exception in a handler propagate instead of becoming a ``protocol_error`` entry (for
    tests that must see a programming error as one)."""

    def __init__(self) -> None:
        self.log = EntryLog()
        self.turn_statuses: list[TurnStatus] = []

    @property
    def work_dir(self) -> str | None:
        """The task's working directory (the seed's ``normalizeOutput(stream, workDir)``): paths in
        tool entries and their diffs are relative to it.  Set by whoever knows it (the run, a raw
        log's header) before the first chunk; else the normalizer takes the one the agent reports."""
        return self.log.work_dir

    @work_dir.setter
    def work_dir(self, value: str | None) -> None:
        log = self.log
        value = value.rstrip("/") or "/" if value else None
        if value != log.work_dir:
            log.work_dir = value
            log._shaped_below = log._count  # (their actions are shaped again when next updated)

    def agent_cwd(self, cwd: str | None) -> None:
        """The working directory the agent reports: the one paths are made relative to, unless
        the caller gave one."""
        if cwd and self.log.work_dir is None:
            self.work_dir = cwd

    def bound(self, window: int = DEFAULT_WINDOW) -> None:
        """Flat memory for a consumer that streams the patches: see :meth:`EntryLog.bound`.
        Only the last few :attr:`turn_statuses` are kept then."""
        self.log.bound(window)
        self.log.after_sweep(self._trim_turns)

    def _trim_turns(self) -> None:
        del self.turn_statuses[:-16]

    def released(self, exc: EntryReleased, line: str, ts: datetime | None) -> None:
        """A line that changes an entry a bounded log let go of: an error entry saying so (the
        consumer holds the entry as it was last sent)."""
        self.log.error(
            f"A late line changed entry {exc.index}, which a streaming run or replay no longer holds; "
            "the change is not shown",
            "entry_released",
            ts,
            content=line if len(line) <= SHOWN_LINE_CHARS else line[:SHOWN_LINE_CHARS] + " [...]",
            released_index=exc.index,
        )

    @abc.abstractmethod
    def feed(self, chunk: bytes, stream: Stream = "stdout", ts: datetime | None = None) -> list[EntryPatch]:
        """Consume one chunk; return the patches it produced."""

    def feed_wire(
        self,
        chunk: bytes,
        stream: Stream = "stdout",
        ts: datetime | None = None,
        keep: Callable[[WireLine], bool] | None = None,
    ) -> tuple[list[WireLine], list[EntryPatch]]:
        """:meth:`feed`, also returning the lines of the chunk that ``keep`` wants, as the wire
        parsed them: the live run hands those same events to the peer, so each line is framed
        and parsed once, and by the very code a replay runs (which keeps none).  A line is kept
        only if wanted: a chunk's parses held until its end would make the garbage collector's
        passes dearer.  A normalizer that reads no lines (a screen's) has none."""
        return [], self.feed(chunk, stream, ts)

    @abc.abstractmethod
    def finish(self, ts: datetime | None = None) -> list[EntryPatch]:
        """End of the run: flush partial lines and close what is still open."""

    def note(self, event: Note | dict[str, Any], ts: datetime | None = None) -> list[EntryPatch]:
        """A decision or finding of the client's (:mod:`orchestrate.wire.notes`), recorded in the
        raw log as an event; a raw log's JSON form (a replay) is read into its type first.

        Shared kinds: :class:`RunError` (the run's own verdict: timeout, the process died ...)
        becomes an error entry; :class:`Restart` (a new process continues the run) flushes partial
        lines."""
        if isinstance(event, dict):
            # A raw log's note of a kind this normalizer does not act on is not even read into
            # its type: codex exec's and Cursor's captures are thousands of short runs, each
            # with its notes (the agent's exit, its directory), where that costs as much as a line.
            reads = self.notes_read
            if reads is not None:
                kind = event.get("type")
                if type(kind) is str and kind not in reads:
                    return self.log.drain()
            note = parse_note(event)
        else:
            note = event
        try:
            self.on_note(note, ts)
        except EntryReleased as gone:  # (not ``exc``: compiled, one name has one type)
            self.released(gone, _event_text(note.to_json()), ts)
        except Exception as exc:
            if self.strict:
                raise
            self.log.protocol_error(
                f"A client event could not be handled ({_describe(exc)})",
                _event_text(note.to_json()),
                ts,
                exception=type(exc).__name__,
            )
        return self.log.drain()

    notes_read: ClassVar[frozenset[str] | None] = None
    """The kinds of note (``RunError.kind`` ...) that :meth:`on_note` acts on, if declared; a
    note of another kind changes nothing.  None: any kind may matter (the default, so that a
    subclass which reads a new kind cannot be forgotten)."""

    def on_note(self, event: Note, ts: datetime | None) -> None:
        match event:
            case RunError():
                self.log.error(
                    event.message, event.code, ts, content=event.line, stderr_tail=event.stderr_tail
                )
            case Restart():
                self.restart(event.reason, ts)

    def restart(self, reason: str, ts: datetime | None) -> None:
        self.log.add(SystemMessage(), reason, ts)

    @property
    def outcome(self) -> Literal["success", "failed", "interrupted"] | None:
        """How the last turn ended, as the agent reported it; None if it never said."""
        if not self.turn_statuses:
            return None
        last = self.turn_statuses[-1]
        return "success" if last == "completed" else "interrupted" if last == "interrupted" else "failed"

    @property
    def entries(self) -> list[NormalizedEntry]:
        return self.log.entries


@mypyc_attr(allow_interpreted_subclasses=True)
class LineNormalizer(Normalizer):
    """A normalizer for a line protocol: its wire frames and parses each line once
    (:class:`~orchestrate.wire.lines.JsonLinesWire`), one handler per line."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        super().__init__()
        self.max_line_bytes = max_line_bytes
        self.wire = JsonLinesWire(max_line_bytes)

    framed: ClassVar[frozenset[Stream]] = frozenset(("stdout", "stderr", "stdin"))
    """The streams whose bytes are the protocol's lines.  Another stream's chunks go whole to
    :meth:`unframed`, never to the wire (a prompt sent as plain text, tracing output)."""

    def feed(self, chunk: bytes, stream: Stream = "stdout", ts: datetime | None = None) -> list[EntryPatch]:
        if stream not in self.framed:
            return self.unframed(chunk, stream, ts)
        self._lines(self.wire.feed(chunk, stream, ts))
        self.chunk_done(stream)
        return self.log.drain()

    def feed_wire(
        self,
        chunk: bytes,
        stream: Stream = "stdout",
        ts: datetime | None = None,
        keep: Callable[[WireLine], bool] | None = None,
    ) -> tuple[list[WireLine], list[EntryPatch]]:
        if keep is None or stream not in self.framed:
            return [], self.feed(chunk, stream, ts)
        kept: list[WireLine] = []
        self._lines(self.wire.feed(chunk, stream, ts), keep, kept)
        self.chunk_done(stream)
        return kept, self.log.drain()

    def unframed(self, chunk: bytes, stream: Stream, ts: datetime | None) -> list[EntryPatch]:
        """A chunk of a stream that is not :attr:`framed`: it shows nothing, unless a protocol
        says otherwise."""
        return []

    def chunk_done(self, stream: Stream) -> None:
        """After the lines of one chunk of ``stream`` (a protocol whose meaning depends on what
        came in one write, Codex's, looks here)."""

    def finish(self, ts: datetime | None = None) -> list[EntryPatch]:
        self._flush_framers(ts)
        try:
            self.close(ts)
        except Exception as exc:
            if self.strict:
                raise
            self.log.protocol_error(f"Closing the run's entries failed ({_describe(exc)})", "", ts)
        return self.log.drain()

    def _flush_framers(self, ts: datetime | None) -> None:
        events = self.wire.finish(ts)
        if events:  # (the usual end: every line had its line end)
            self._lines(events)

    def _lines(
        self,
        events: Iterable[WireEvent],
        keep: Callable[[WireLine], bool] | None = None,
        kept: list[WireLine] | None = None,
    ) -> None:
        feed_line = self.feed_line
        for event in events:
            if type(event) is WireLine:
                # The one place every line goes through: whatever one line does to a handler (a
                # field of the wrong type, a shape never seen), it costs that line only, never the
                # run.  (The guard is here, not in a function per line: a call less per line.)
                try:
                    feed_line(event)
                except EntryReleased as gone:  # (see note())
                    self.released(gone, event.text, event.ts)
                except Exception as exc:
                    if self.strict:
                        raise
                    self._skipped(event, exc)
                if keep is not None and kept is not None:
                    # A question the peer cannot answer about a line of the wrong shape: it gets
                    # the line, and the run's guard around the peer turns whatever the line does
                    # to it into an entry.  (Inline: this runs per line of a live run.)
                    try:
                        wanted = keep(event)
                    except Exception:
                        wanted = True
                    if wanted:
                        kept.append(event)
            elif isinstance(event, LineDropped) and event.stream == "stdout":
                message = f"{event.stream} line of {event.length} bytes exceeds the limit and was dropped"
                self.log.error(message, "line_too_long", event.ts, content=event.head)

    def _skipped(self, line: WireLine, exc: Exception) -> None:
        self.log.protocol_error(
            f"A {line.stream} line could not be handled and was skipped ({_describe(exc)})",
            line.text,
            line.ts,
            stream=line.stream,
            exception=type(exc).__name__,
        )

    def not_json(self, who: str, line: str, ts: datetime | None) -> None:
        """A line where the protocol wants a JSON object: shown as a protocol error."""
        self.log.protocol_error(f"{who} printed a line that is not a JSON object", line, ts)

    def shapeless_message(self, line: str, ts: datetime | None) -> None:
        """A JSON-RPC message of the agent's that is no request, answer or notification (a
        ``method`` that is not a string, no ``id``): shown as what it is."""
        message = "The agent sent a JSON-RPC message of no known shape"
        self.log.error(message, "protocol_error", ts, content=line)

    def invalid_rpc_id(self, line: str, stream: Stream, ts: datetime | None) -> None:
        """A JSON-RPC message whose id is neither a string nor an integer.  From the agent it is a
        protocol error (a request gets its -32600 answer from the peer); on our side it is that
        answer, whose id is null by the spec, and shows nothing."""
        if stream == "stdout":
            self.log.protocol_error("The agent sent a JSON-RPC message with an invalid id", line, ts)

    def unknown_response(self, request_id: Any, result: Any, error: Any, ts: datetime | None) -> None:
        """An answer to a request we never sent (or answered twice): shown once, as what it is."""
        line = _event_text(
            {"id": request_id, "result": result} if error is None else {"id": request_id, "error": error}
        )
        self.log.protocol_error(f"The agent answered request {request_id!r}, which is not pending", line, ts)

    @abc.abstractmethod
    def feed_line(self, line: WireLine) -> None:
        """Handle one complete line (its text, its JSON value parsed once, its stream and time)."""

    def close(self, ts: datetime | None) -> None:
        """Called once by :meth:`finish` after the last line."""

    def restart(self, reason: str, ts: datetime | None) -> None:
        # A partial line of the old process must not be glued to the new one's first line.
        self._flush_framers(ts)
        super().restart(reason, ts)


_PATCH_FIELDS = {"op", "index", "entry"}
_ENTRY_FIELDS = {"index", "timestamp", "type", "content", "metadata"}


def _entry(
    index: int, ts: datetime | None, type_: EntryType, content: str, meta: EntryMetadata
) -> NormalizedEntry:
    """``build(NormalizedEntry, ...)`` for the model made for every entry: as :func:`_patch`."""
    new = _new(NormalizedEntry)
    _set_dict(new, {"index": index, "timestamp": ts, "type": type_, "content": content, "metadata": meta})
    _set_fields_set(new, _ENTRY_FIELDS)
    _set_extra(new, None)
    _set_private(new, None)
    return new


def _patch(op: str, index: int, entry: NormalizedEntry) -> EntryPatch:
    """``build(EntryPatch, ...)`` for the one model made for every entry of every drain: the
    field set is shared (pydantic never changes it in place, and nothing here reads it)."""
    new = _new(EntryPatch)
    _set_dict(new, {"op": op, "index": index, "entry": entry})
    _set_fields_set(new, _PATCH_FIELDS)
    _set_extra(new, None)
    _set_private(new, None)
    return new


def _summary_text(count: int) -> str:
    return f"{count} more protocol errors were not shown (the raw log has every line)"


def _describe(exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 200 else text[:200] + "..."


def _event_text(event: dict[str, Any]) -> str:
    try:
        return orjson.dumps(event, default=str).decode()
    except (TypeError, orjson.JSONEncodeError):
        return repr(event)
