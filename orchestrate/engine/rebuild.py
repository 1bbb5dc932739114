"""A run's entries rebuilt from its raw log, the source of truth: the stored patches are a cache of
what the normalizer made of it live.  The raw log file is used while it is on this machine; when it
is gone (another machine, cleaned up), the raw records the engine mirrored into the store are.
Either way it is the same replay `orchestrate replay` does, so a rebuilt run and a live one agree."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import orjson

from ..entries import EntryPatch, NormalizedEntry
from ..executors.base import Executor
from ..registry import Registry, default_registry
from ..replay import normalizer_for_file, replay
from ..store import Event, Store

__all__ = ["rebuild_entries", "rebuild_patches"]


def rebuild_patches(store: Store, run_id: int, registry: Registry | None = None) -> list[EntryPatch]:
    """The patches the run's raw log gives when replayed (blocking: call it from a thread)."""
    run = store.run(run_id)
    make = (registry or default_registry).get
    if run.raw_log and Path(run.raw_log).is_file():
        return _replay(Path(run.raw_log), make(store.get(run.task_id).executor)())
    lines = [orjson.dumps(e.data) for e in _raw_events(store, run_id)]
    if not lines:
        return []  # nothing was recorded of it (it never started)
    executor = make(store.get(run.task_id).executor)()
    fd, name = tempfile.mkstemp(prefix=f"run-{run_id}-", suffix=".jsonl")  # 0600, like the log
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"\n".join(lines) + b"\n")
        return _replay(Path(name), executor)
    finally:
        Path(name).unlink()


def rebuild_entries(store: Store, run_id: int, registry: Registry | None = None) -> list[NormalizedEntry]:
    """The run's entries, in index order, as its raw log leaves them."""
    found: dict[int, NormalizedEntry] = {}
    for patch in rebuild_patches(store, run_id, registry):
        found[patch.index] = patch.entry
    return [found[i] for i in sorted(found)]


def _replay(path: Path, executor: Executor) -> list[EntryPatch]:
    return list(replay(path, normalizer_for_file(path, executor)))


def _raw_events(store: Store, run_id: int) -> list[Event]:
    events: list[Event] = []
    after = 0
    while page := store.events(run_id=run_id, after=after):
        after = page[-1].run_seq or after
        events.extend(e for e in page if e.kind == "raw")
    return events
