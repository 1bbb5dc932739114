"""Recording a run that a client drives itself (``orchestrate run``) in the store, as a task with one
run, so ``orchestrate tasks`` and ``show`` list it beside queued work.

The recorder is a passenger: every store call is guarded, and once one fails the recorder says so
(``problem``) and does nothing more.  The run itself never waits on it and never fails because of it.
Its run is leased and renewed by a heartbeat thread like a worker's, so a client that dies leaves a run
the next worker finds ``lost``, never a ghost that stays "running".
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..entries import EntryPatch
from ..executors.base import ExecutorOptions
from ..run import Run, RunResult
from ..store import EventWriter, Store, TaskSpec
from ..store.records import RUN_OPTIONS
from ..task import Task
from .ends import run_end
from .procinfo import HOST, start_time

__all__ = ["RunRecorder"]

_CANCEL_POLL = 0.5  # how soon a cancel asked from another process stops the run
_MIRROR_STEP = 8 << 20
"""Bytes of raw log put for the store before waiting for them to be written: the log is read no faster
than the store takes it, so a long run's log is not held in memory whole on its way there (a line is
a chunk read from the agent, up to a pipe's capacity: a count of lines would bound nothing)."""
_MIRROR_WAIT = 10.0
"""How long one step waits for the store; once a wait is over time (a locked store), the rest is put
without waiting, and the writer's own bound applies."""


class RunRecorder:
    """``RunRecorder.start(...)``, :meth:`attach` the run, pass patches through :meth:`sink`, then
    :meth:`finish` with the result.  ``task_id`` / ``run_id`` are None while nothing is recorded."""

    def __init__(self, lease: float = 30.0, cancelled: threading.Event | None = None) -> None:
        self.lease = lease
        self.task_id: int | None = None
        self.run_id: int | None = None
        self.problem: str | None = None
        """Why the run is not (or not wholly) recorded; None while all is well."""
        self._store: Store | None = None
        self._writer: EventWriter | None = None
        self._run: Run | None = None
        self._worker = f"{HOST}:{os.getpid()}:run-{secrets.token_hex(3)}"
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._pid_recorded = False
        self.cancelled = cancelled or threading.Event()
        """Set when a client asked the store to cancel this task (``orchestrate cancel``)."""

    @classmethod
    def start(
        cls,
        executor: str,
        options: ExecutorOptions,
        task: Task,
        *,
        url: str | None = None,
        lease: float = 30.0,
        metadata: dict[str, Any] | None = None,
        cancelled: threading.Event | None = None,
    ) -> RunRecorder:
        """Open the store and record a running task for ``task``; never raises.  ``cancelled`` is
        the event to set when a client asks the store to cancel the task (a new one if None)."""
        recorder = cls(lease, cancelled)
        try:
            store = recorder._store = Store.open(url, busy_timeout=1.0)
            spec = TaskSpec(
                prompt=task.prompt,
                executor=executor,
                executor_options=options.model_dump(mode="json", exclude_defaults=True),
                run_options=task.model_dump(mode="json", include=set(RUN_OPTIONS), exclude_defaults=True),
                cwd=task.cwd,
                metadata=metadata or {"source": "orchestrate run"},
            )
            record, run = store.open_run(spec, recorder._worker, lease)
            recorder.task_id, recorder.run_id = record.id, run.id
            recorder._writer = EventWriter(store).start()
            recorder._beat = threading.Thread(target=recorder._heartbeats, name="orchestrate-run-lease")
            recorder._beat.daemon = True
            recorder._beat.start()
        except Exception as exc:  # a passenger: the run goes on unrecorded
            recorder._fail(exc)
        return recorder

    def attach(self, run: Run) -> None:
        """The run being recorded: its agent's pid is stored (by the heartbeat thread) once known."""
        self._run = run

    def sink(self, inner: Callable[[EntryPatch], None]) -> Callable[[EntryPatch], None]:
        """``inner``, storing each patch as well."""

        def both(patch: EntryPatch) -> None:
            inner(patch)
            self.put(patch.model_dump_json(by_alias=True, exclude_none=True))

        return both

    def put(self, patch: str) -> None:
        """Store one patch (its JSON); nothing when the run is not recorded."""
        writer, task_id, run_id = self._writer, self.task_id, self.run_id
        if writer is not None and task_id is not None and run_id is not None:
            writer.put(task_id, run_id, "patch", patch)

    def record_workspace(self, info: dict[str, Any], start: int | None, end: int | None) -> None:
        """The workspace the run worked in and the checkpoints its turn started and ended on."""
        store, task_id, run_id = self._store, self.task_id, self.run_id
        if store is None or task_id is None or run_id is None:
            return
        try:
            store.set_workspace(task_id, info)
            store.set_checkpoints(run_id, start=start, end=end)
        except Exception as exc:  # a passenger: the refs and the raw log still have them
            self.problem = f"the workspace is not recorded in the store: {exc}"

    def finish(self, result: RunResult | None, error: BaseException | None = None) -> None:
        """Store the raw log and the run's end; the task ends done, cancelled or failed."""
        self._stop.set()
        store, writer, task_id, run_id = self._store, self._writer, self.task_id, self.run_id
        try:
            if store is None or writer is None or task_id is None or run_id is None:
                return
            if self._beat is not None:
                self._beat.join(5)
            self._record_process(store, run_id)  # a run faster than the first beat: pid and log still
            log = result.raw_log if result is not None else (self._run.raw_log_path if self._run else None)
            if log is not None:
                self._mirror(writer, Path(log), task_id, run_id)
            writer.flush(10.0)
            trouble = writer.trouble.pop(task_id, None)
            if error is not None:
                why = f"{type(error).__name__}: {error}"
                end = run_end(None, ("engine_error", f"the run did not finish: {why}"))
            else:
                end = run_end(result)
            outcome = end.get("outcome")
            status = {"success": "done", "cancelled": "cancelled", "interrupted": "cancelled"}
            notice = f"store: {trouble.describe()}" if trouble is not None else None
            store.finish_run(run_id, end, status.get(str(outcome), "failed"), notice=notice)
        except Exception as exc:
            self._fail(exc)
        finally:
            self._close()

    def _mirror(self, writer: EventWriter, log: Path, task_id: int, run_id: int) -> None:
        try:
            with log.open("rb") as f:
                waiting, put = True, 0
                for line in f:
                    if line.strip():
                        writer.put(task_id, run_id, "raw", line.rstrip(b"\n"))
                        put += len(line)
                        if waiting and put >= _MIRROR_STEP:
                            waiting, put = writer.flush(_MIRROR_WAIT), 0
        except OSError as exc:
            self.problem = f"the raw log could not be stored: {exc}"

    def _heartbeats(self) -> None:
        store, run_id, task_id = self._store, self.run_id, self.task_id
        assert store is not None and run_id is not None and task_id is not None
        next_beat = time.monotonic() + self.lease / 3
        next_cancel_check = time.monotonic()
        while not self._stop.wait(0.05 if not self._pid_recorded else _CANCEL_POLL):
            try:
                self._record_process(store, run_id)
                if time.monotonic() >= next_cancel_check:
                    next_cancel_check = time.monotonic() + _CANCEL_POLL
                    if task_id in store.cancel_requested([task_id]):
                        self.cancelled.set()  # the client stops its run (see cli/tasks.py)
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + self.lease / 3
                    store.heartbeat(self._worker, [run_id], self.lease)
            except Exception as exc:  # the lease is renewed on the next beat, or it lapses: never raise
                self.problem = f"the store missed a heartbeat: {exc}"

    def _record_process(self, store: Store, run_id: int) -> None:
        """The agent's pid, start time and raw log, once the run has spawned it (tried once:
        recovery can do without it)."""
        if not self._pid_recorded and self._run is not None and self._run.pids:
            self._pid_recorded = True
            pid = self._run.pids[0]
            store.set_process(run_id, pid, start_time(pid), str(self._run.raw_log_path))

    def _fail(self, exc: BaseException) -> None:
        self.problem = f"the run is not recorded in the store: {type(exc).__name__}: {exc}"
        self._close()

    def _close(self) -> None:
        self._stop.set()
        writer, store = self._writer, self._store
        self._writer = self._store = None
        try:
            if writer is not None:
                writer.close(5.0)
        finally:
            if store is not None:
                store.close()
