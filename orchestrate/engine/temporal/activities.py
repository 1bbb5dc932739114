"""The activities a Temporal worker runs: one agent turn (claim the task's next run in the store, run the
agent through the engine's runner, heartbeat while it works) and the store side of a cancel.

Out of band: the turn's entry patches and raw log records go to the store through the batching event
writer, as in the embedded engine; only a small :class:`TurnResult` goes back into workflow history.
Approvals wait in the store (the engine's :class:`StoreApprovals`): any client, on any machine, answers
them there, the first answer wins and a timeout denies.  Cancels (``orchestrate cancel``), interrupts of
the current turn (``orchestrate interrupt``) and follow-ups (``orchestrate send``) go through the store as
well, seen at the turn's next heartbeat by the worker that runs it; a cancel through Temporal arrives as
the activity's cancellation, at the next heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
from temporalio import activity
from temporalio.client import Client

from ...store import TERMINAL, EventWriter, Limits, RunRecord, Store, StoreError
from ..procinfo import HOST, kill_group_if_same
from ..runner import LiveRun, RunSettings, execute
from .shapes import CANCEL, TURN, WAKE, TurnInput, TurnResult, workflow_id

__all__ = ["TurnActivities", "reap", "reap_dead_workers"]

T = TypeVar("T")


class TurnActivities:
    """The activities of one worker process, bound to its store, writer and settings."""

    def __init__(
        self,
        store: Store,
        writer: EventWriter,
        settings: RunSettings,
        *,
        worker: str,
        limits: Limits,
        lease: float,
        beat: float,
        executors: Sequence[str] | None = None,
        client: Client | None = None,
        prefix: str = "orchestrate",
        wake_batch: int = 8,
    ) -> None:
        self.store = store
        self.writer = writer
        self.settings = settings
        self.worker = worker
        self.limits = limits
        self.lease = lease
        self.beat = beat
        self.executors = executors
        self.client = client
        self.prefix = prefix
        self.wake_batch = wake_batch
        self.live: dict[int, LiveRun] = {}
        """Runs this worker is executing, by run id."""

    @activity.defn(name=TURN)
    async def turn(self, request: TurnInput) -> TurnResult:
        """Run the task's next turn here, if it is runnable now; else say why not."""
        task_id = request.task_id
        attempt = activity.info().attempt
        notes: list[str] = []
        if attempt > 1:
            # Temporal gave us a turn another worker started and stopped heartbeating: its run is lost,
            # the task retried here with the agent's session resumed, the events numbered on.
            why = f"its worker stopped heartbeating to Temporal (turn attempt {attempt})"
            taken = await self._call(self.store.take_over, task_id, self.worker, why)
            for run in taken:
                if reap(run):
                    notes.append(f"killed the agent of run {run.id} left by {run.worker}")
        got = await self._call(
            lambda: self.store.claim(self.worker, self.limits, self.lease, self.executors, task_id=task_id)
        )
        if got is None:
            task = await self._call(self.store.get, task_id)
            state = "ended" if task.status in TERMINAL else "waiting"
            return TurnResult(state, task.status, reason=task.reason, worker=self.worker, notes=notes)
        task, run = got
        live = self.live[run.id] = LiveRun(task, run)
        # The run is its own task: Temporal cancelling this activity must stop the agent through the
        # run's cancel (and record the end), not tear the run down mid-write.
        job = asyncio.ensure_future(execute(self.store, self.writer, live, self.settings))
        beats = asyncio.ensure_future(self._heartbeats(live))
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            if not _asked_to_cancel():
                # This worker is going away, or Temporal gave up on this attempt (its heartbeats came
                # too late: a loaded machine, a stopped worker): the task is not cancelled.  Leave the
                # run for the retry (which takes it over and resumes the session), record nothing.
                live.lease_lost = True
            live.cancel.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(job), 60)
            raise
        finally:
            beats.cancel()
            self.live.pop(run.id, None)
        after = await self._call(self.store.get, task_id)
        ended = await self._call(self.store.run, run.id)
        await self._wake_waiting()
        return TurnResult(
            "ran",
            after.status,
            run_id=run.id,
            outcome=ended.outcome,
            session_id=ended.session_id,
            input_tokens=ended.input_tokens,
            output_tokens=ended.output_tokens,
            cost_usd=ended.cost_usd,
            worker=self.worker,
            reason=after.reason,
            notes=notes,
        )

    @activity.defn(name=CANCEL)
    async def cancel(self, task_id: int) -> str:
        """The store's side of a workflow cancelled through Temporal."""
        return (await self._call(self.store.cancel, task_id, "cancelled through Temporal")).status

    async def _heartbeats(self, live: LiveRun) -> None:
        """Tell Temporal the turn is alive (its cancel comes back this way), renew the store's lease, and
        stop the agent when a client asked the store to cancel the task."""
        run_id, task_id = live.run.id, live.task.id
        while True:
            activity.heartbeat(run_id)
            with contextlib.suppress(StoreError):  # a store hiccup: the next beat tries again
                held = await self._call(self.store.heartbeat, self.worker, [run_id], self.lease)
                if run_id not in held:
                    live.lease_lost = True  # taken over by another worker: it owns the task now
                    live.cancel.set()
                if task_id in await self._call(self.store.cancel_requested, [task_id]):
                    live.cancel.set()
                elif task_id in await self._call(self.store.interrupt_requested, [task_id]):
                    live.interrupt.set()  # the turn only: the workflow goes on to the task's next turn
            await asyncio.sleep(self.beat)

    async def _wake_waiting(self) -> None:
        """A run ended: the best-placed tasks waiting for a slot or a dependency may go now.  Signal
        their workflows rather than let them sleep out their backoff."""
        if self.client is None:
            return
        with contextlib.suppress(StoreError):
            waiting = await self._call(self.store.queued, self.wake_batch)
            for task_id in waiting:
                with contextlib.suppress(Exception):  # no workflow yet (the dispatcher starts it), or done
                    await self.client.get_workflow_handle(workflow_id(task_id, self.prefix)).signal(WAKE)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(lambda: fn(*args))


def _asked_to_cancel() -> bool:
    """Whether the turn's cancellation is a cancel asked for (the workflow cancelled through
    Temporal), not this worker's shutdown, an attempt that timed out or that the server no longer
    knows (its heartbeats stopped), nor an operator's pause or reset (each followed by a new
    attempt).  Where the SDK gives no details, only a shutdown is told apart."""
    if activity.is_worker_shutdown():
        return False
    details = activity.cancellation_details()
    if details is None:
        return True
    return not (
        details.timed_out or details.not_found or details.worker_shutdown or details.paused or details.reset
    )


def reap(run: RunRecord) -> bool:
    """Kill what is left of ``run``'s agent if it ran on this machine (pid and start time must match:
    a reused pid is left alone).  True if something was killed."""
    worker = run.worker or ""
    if worker.split(":", 1)[0] != HOST or not run.pid:
        return False
    return kill_group_if_same(run.pid, run.pid_started)


def _worker_alive(worker: str) -> bool:
    parts = worker.split(":")
    if len(parts) < 2 or parts[0] != HOST or not parts[1].isdigit():
        return True  # another machine's, or not a worker name we made: not ours to judge
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_dead_workers(store: Store) -> list[RunRecord]:
    """When a worker starts on a machine: kill the agents that workers which died on this machine left
    running (their runs stay for Temporal to retry, which takes them over).  Returns the runs reaped."""
    reaped = []
    for run in store.expired_runs(now=float("inf")):  # every live run
        if run.worker and not _worker_alive(run.worker) and reap(run):
            reaped.append(run)
    return reaped
