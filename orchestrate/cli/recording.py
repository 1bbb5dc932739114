"""`orchestrate run`, recorded in the store as a task, with the store opened beside the run.

Opening the store costs more than starting most agents (importing SQLAlchemy alone is a few hundred
milliseconds, a first start also migrates), and a person watching a run waits for its first entry,
not for the bookkeeping.  So the store is opened on a thread once the agent's first entry is out
(or a few seconds after the start, for an agent slow to say anything, unless it is still busy
starting up: then once it is not, or its first entry is out, within a bound): before that, the
thread would take the interpreter's lock and a core from the agent's start-up and from the first
entry.
The patches that come before the store is open wait in a bounded list and are stored when it is.
This module imports nothing of the store itself: that happens on the thread.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from . import resume_collector

if TYPE_CHECKING:  # types only: this module is imported before the agent is spawned
    from ..engine.record import RunRecorder
    from ..entries import EntryPatch
    from ..executors.base import ExecutorOptions
    from ..run import Run, RunResult

__all__ = ["STORE_ENV", "Recording", "record_run"]

STORE_ENV = "ORCHESTRATE_STORE"

_MAX_EARLY = 10_000
"""Patches kept while the store opens; past that they are left to the raw log, which the recorder
stores whole at the end (entries can be rebuilt from it)."""
_FIRST_WAIT = 3.0
"""How long the thread waits for the agent's first entry before opening the store anyway ..."""
_BUSY_WAIT = 12.0
"""... and how much longer at most while the agent is still busy starting up: its processes' CPU
time growing by at least a quarter of the time that passes (a Node CLI loading its code: Qwen Code
takes 3-5 s on a 2-core machine before its first entry).  The store's opening, ~0.4 s of CPU, would
take a core from it; an agent that waits (on its model, say) costs nothing to open beside."""
_SAMPLE = 0.25
_OPEN_WAIT = 30.0
"""How long the end of a run waits for a store that is still opening (a first start migrates)."""


class Recording:
    """What ``record_run`` yields: wrap the run's sink with :meth:`sink`, set :attr:`result`."""

    def __init__(self) -> None:
        self.result: RunResult | None = None
        self.cancelled = threading.Event()
        """Set when `orchestrate cancel` (any process) asked for this run's task to stop."""
        self.problem: str | None = None
        self._lock = threading.Lock()
        self._early: list[str] | None = []  # patches stored once the recorder exists; None after
        self._recorder: RunRecorder | None = None
        self._opener: threading.Thread | None = None
        self._patches = 0
        self._go = threading.Event()  # the agent's first entry is out (the prompt's is ours), or the end

    def sink(self, inner: Callable[[EntryPatch], None]) -> Callable[[EntryPatch], None]:
        """``inner``, storing each patch as well (once the store is open; until then, kept)."""

        def both(patch: EntryPatch) -> None:
            inner(patch)
            self._patches += 1
            if self._patches == 2:
                self._go.set()
                resume_collector()  # paused while the command loaded (cli/__init__.py)
            data = patch.model_dump_json(by_alias=True, exclude_none=True)
            with self._lock:
                if self._early is None:
                    if self._recorder is not None:
                        self._recorder.put(data)
                elif len(self._early) < _MAX_EARLY:
                    self._early.append(data)
                elif self.problem is None:
                    self.problem = "the store opened late: some patches are kept only in the raw log"

        return both

    @property
    def ids(self) -> dict[str, int] | None:
        """``{"taskId": T, "runId": R}`` once recorded (the result line of ``--output jsonl``)."""
        self._wait_open()
        recorder = self._recorder
        if recorder is None or recorder.task_id is None or recorder.run_id is None:
            return None
        return {"taskId": recorder.task_id, "runId": recorder.run_id}

    def open(self, executor: str, options: ExecutorOptions, run: Run, url: str | None) -> None:
        """Open the store and record ``run`` on a thread; returns at once."""

        def opening() -> None:
            spoke = self._go.wait(_FIRST_WAIT)
            resume_collector()  # (no first entry within _FIRST_WAIT: the collector waits no longer)
            if not spoke:
                _while_starting(run, self._go)
            try:
                from ..engine.record import RunRecorder

                recorder = RunRecorder.start(executor, options, run.task, url=url, cancelled=self.cancelled)
                recorder.attach(run)
            except Exception as exc:  # RunRecorder.start never raises; an import can
                self.problem = f"the run is not recorded in the store: {type(exc).__name__}: {exc}"
                with self._lock:
                    self._early = None
                return
            with self._lock:
                early, self._early = self._early or [], None
                self._recorder = recorder
                for data in early:
                    recorder.put(data)

        self._opener = threading.Thread(target=opening, name="orchestrate-store-open", daemon=True)
        self._opener.start()

    def unrecorded(self) -> None:
        """The store is off: the patches are shown, not kept for a store that will not open (a
        long run's first :data:`_MAX_EARLY` patches were kept for nothing, and it warned that the
        store opened late)."""
        with self._lock:
            self._early = None

    def record_workspace(self, info: dict[str, Any], start: int | None, end: int | None) -> None:
        """Store the run's workspace and the checkpoints its turn started and ended on."""
        self._wait_open()
        if self._recorder is not None:
            self._recorder.record_workspace(info, start, end)

    def finish(self, error: BaseException | None) -> None:
        self._wait_open()
        recorder = self._recorder
        if recorder is None:
            return
        recorder.finish(self.result, error if self.result is None else None)
        self.problem = recorder.problem or self.problem

    def _wait_open(self) -> None:
        self._go.set()
        opener = self._opener
        if opener is not None and opener.is_alive():
            opener.join(_OPEN_WAIT)
            if opener.is_alive() and self.problem is None:
                # The run is over; the thread dies with the process and the lease it took lapses
                # (the next worker marks that run lost), so nothing stays "running".
                self.problem = f"the store did not open within {_OPEN_WAIT:.0f} s: the run is not recorded"


def _while_starting(run: Run, go: threading.Event) -> None:
    """Wait for ``go`` while the agent is busy starting up (see _BUSY_WAIT), at most _BUSY_WAIT."""
    from ..process.usage import tree_cpu_seconds

    deadline = time.monotonic() + _BUSY_WAIT
    while time.monotonic() < deadline:
        pid = run.pids[-1] if run.pids else None  # (the agent's, once the run has it)
        before = tree_cpu_seconds(pid) if pid is not None else None
        if before is None or go.wait(_SAMPLE):
            return
        after = tree_cpu_seconds(pid) if pid is not None else None
        if after is None or after - before < _SAMPLE / 4:
            return


@contextmanager
def record_run(executor: str, options: ExecutorOptions, run: Run, output: str) -> Iterator[Recording]:
    """Record ``run`` (an ``orchestrate run``) in the store as a task.  A store that fails is
    reported on stderr and nothing else: the run goes on and its exit code is its own."""
    recording = Recording()
    url = os.environ.get(STORE_ENV)
    resume = None
    if url != "off":
        recording.open(executor, options, run, url)  # (its thread resumes the collector in time)
    else:
        recording.unrecorded()
        resume = threading.Timer(_FIRST_WAIT, resume_collector)
        resume.daemon = True
        resume.start()
    error: BaseException | None = None
    try:
        yield recording
    except BaseException as exc:
        error = exc
        raise
    finally:
        resume_collector()
        if resume is not None:
            resume.cancel()
        recording.finish(error)
        # After SIGHUP the terminal may be gone: what cannot be shown is not an error (the run's
        # exit code must still say how it ended).
        with contextlib.suppress(OSError, ValueError):
            if recording.problem:
                click.echo(f"orchestrate: {recording.problem}", err=True)
