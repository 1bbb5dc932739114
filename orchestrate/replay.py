"""Replay a raw log (or a plain stdout capture) through an executor's normalizer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .process.rawlog import read_raw_log
from .wire.notes import parse_note

if TYPE_CHECKING:  # types only: ``orchestrate`` imports this module whole (see its __init__)
    from .entries import EntryPatch
    from .executors.base import Executor
    from .normalizers.base import Normalizer

__all__ = ["normalizer_for_file", "replay"]


def normalizer_for_file(path: Path, executor: Executor) -> Normalizer:
    """The executor's normalizer for ``path``: its live one for a raw log of ours, the one matching
    the format for a plain capture."""
    header, _ = read_raw_log(path)
    if header is not None:
        return executor.create_normalizer()
    with path.open("rb") as f:
        first = next((line for line in f if line.strip()), b"")
    return executor.capture_normalizer(first)


def replay(path: Path, normalizer: Normalizer, *, streaming: bool = False) -> Iterator[EntryPatch]:
    """The patches ``normalizer`` produces from ``path``, as the live run produced them.

    ``streaming``: the caller hands each patch on and keeps what it needs itself, so the
    normalizer keeps only recent entries and open tool calls (:meth:`Normalizer.bound`): memory
    stays flat however long the log, and ``normalizer.entries`` is only that window afterwards.
    The patches are the same, unless a line changes an entry older than the window that is not an
    open tool call (rare): that change is an ``entry_released`` error entry instead."""
    if streaming:
        normalizer.bound()
    header, records = read_raw_log(path)
    if header is not None and normalizer.work_dir is None and isinstance(header.get("cwd"), str):
        normalizer.work_dir = header["cwd"]  # the task's working directory: paths relative to it
    last_ts = None
    for rec in records:
        last_ts = rec.ts or last_ts
        if rec.event is not None:
            yield from normalizer.note(parse_note(rec.event), rec.ts)  # typed, as the live run made it
        elif rec.stream is not None:
            yield from normalizer.feed(rec.data, rec.stream, rec.ts)
    yield from normalizer.finish(last_ts)
