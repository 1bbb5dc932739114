"""``orchestrate worker --temporal ADDRESS``: a Temporal worker that runs agent turns on this machine.

It polls two task queues: the workflows' (any worker can drive any task's workflow) and its workspace
queue (``--queue``, default ``orchestrate``), where the turns of the tasks whose files are on this machine
are scheduled, so a retried turn lands on a worker that can reach them.  It also dispatches: every queued
task in the store gets its workflow (started once, by whichever worker sees it first; a task queued again
later, by a follow-up or a retry, wakes or restarts it), so ``orchestrate submit`` and a board that only
writes to the store work unchanged.  And when it starts, it kills the agents that workers which died on
this machine left behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from ...approvals.base import ApprovalService
from ...process.pipes import ShutdownPolicy
from ...registry import Registry, default_registry
from ...store import EventWriter, Limits, Store, StoreError, home
from ..observers import Observers
from ..procinfo import HOST
from ..runner import RunSettings, Watchdogs
from .activities import TurnActivities, reap_dead_workers
from .connect import connect
from .shapes import WAKE, WORKFLOW, TaskInput, workflow_id
from .workflow import TaskWorkflow

__all__ = ["QUEUE_KEY", "TemporalOptions", "TemporalWorker"]

QUEUE_KEY = "temporal_queue"
"""A task's metadata key naming the workspace queue its turns run on (default: the worker's ``queue``)."""


@dataclass(frozen=True)
class TemporalOptions:
    address: str | None = None
    namespace: str | None = None
    queue: str = "orchestrate"
    """This worker's workspace queue: the turns it takes."""
    prefix: str = "orchestrate"
    """Workflow ids are ``PREFIX-task-ID`` and the workflows' queue ``PREFIX-workflows``: one prefix per
    store sharing a namespace."""
    heartbeat_timeout: float = 30.0
    turn_retries: int = 20


class TemporalWorker:
    """``async with TemporalWorker(store, options, ...) as w: await w.run()`` until :meth:`stop`."""

    def __init__(
        self,
        store: Store,
        options: TemporalOptions,
        *,
        limits: Limits | None = None,
        capacity: int = 4,
        lease: float | None = None,
        poll: float = 0.2,
        registry: Registry | None = None,
        approvals: ApprovalService | None = None,
        executors: Sequence[str] | None = None,
        shutdown: ShutdownPolicy | None = None,
        log_dir: Path | None = None,
        watchdogs: Watchdogs | None = None,
        observers: Sequence[Any] = (),
        client: Client | None = None,
    ) -> None:
        self.store = store
        self.options = options
        self.limits = limits or Limits()
        self.capacity = capacity
        # The store's lease outlives Temporal's heartbeat timeout: Temporal decides when a worker is gone.
        self.lease = lease if lease is not None else max(30.0, options.heartbeat_timeout * 2)
        self.poll = poll
        self.executors = executors
        self.worker = f"{HOST}:{os.getpid()}:{secrets.token_hex(3)}"
        self.writer = EventWriter(store)
        self.settings = RunSettings(
            registry or default_registry,
            approvals,
            log_dir or home() / "runs",
            shutdown,
            min(0.1, poll / 2),
            watchdogs or Watchdogs(),
            Observers(observers),
        )
        self.client = client
        self.reaped: list[int] = []
        """Runs whose agents this worker killed when it started (left by dead workers on this machine)."""
        self.dispatched = 0
        self._started: dict[int, int] = {}
        self._stop = anyio.Event()
        self.activities: TurnActivities | None = None

    @property
    def workflow_queue(self) -> str:
        return f"{self.options.prefix}-workflows"

    async def __aenter__(self) -> TemporalWorker:
        """Connect, enter this worker on the store, and kill what dead workers on this machine left
        running."""
        if self.client is None:
            self.client = await connect(self.options.address, self.options.namespace)
        # Refused (WorkerKindError) while plain workers work the store: see store/workers.py.
        await anyio.to_thread.run_sync(self.store.enter_worker, self.worker, "temporal", self.lease)
        reaped = await anyio.to_thread.run_sync(reap_dead_workers, self.store)
        self.reaped = [run.id for run in reaped]
        self.writer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await anyio.to_thread.run_sync(self.writer.close)
        with contextlib.suppress(StoreError):  # else its entry expires after a lease
            await anyio.to_thread.run_sync(self.store.leave_worker, self.worker)

    def stop(self) -> None:
        """Stop polling for new turns; :meth:`run` returns once the running ones have ended."""
        self._stop.set()

    async def run(self) -> None:
        client = self.client
        assert client is not None, "use the worker as an async context manager"
        activities = self.activities = TurnActivities(
            self.store,
            self.writer,
            self.settings,
            worker=self.worker,
            limits=self.limits,
            lease=self.lease,
            beat=min(self.options.heartbeat_timeout / 3, 5.0),
            executors=self.executors,
            client=client,
            prefix=self.options.prefix,
        )
        # Not sandboxed: the workflow (workflow.py) is a short loop that does no I/O, reads no clock and
        # imports nothing of ours but shapes.py; the sandbox re-creates its module world for every
        # workflow run, which under load made workflow tasks outlast their 10 s timeout.
        runner = UnsandboxedWorkflowRunner()
        turns = Worker(
            client,
            task_queue=self.options.queue,
            activities=[activities.turn, activities.cancel],
            max_concurrent_activities=self.capacity,
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        workflows = Worker(
            client,
            task_queue=self.workflow_queue,
            workflows=[TaskWorkflow],
            workflow_runner=runner,
        )
        async with turns, workflows, anyio.create_task_group() as tg:
            tg.start_soon(self._dispatch_loop, client)
            tg.start_soon(self._still_here)
            await self._stop.wait()
            tg.cancel_scope.cancel()

    async def _still_here(self) -> None:
        """Keep this worker entered on the store (a plain worker is refused meanwhile)."""
        while True:
            await anyio.sleep(self.lease / 3)
            with contextlib.suppress(StoreError):
                await anyio.to_thread.run_sync(self.store.worker_seen, self.worker, self.lease)

    async def _dispatch_loop(self, client: Client) -> None:
        while True:
            with contextlib.suppress(StoreError):
                await self.dispatch(client)
            await anyio.sleep(self.poll)

    async def dispatch(self, client: Client) -> int:
        """Start (or wake) the workflow of every task queued since the last look; how many."""
        queued = await anyio.to_thread.run_sync(lambda: self.store.list_tasks(status="queued", limit=1000))
        # Forget tasks no longer queued (bounded memory); one queued again has a new last_seq anyway.
        now_queued = {task.id for task in queued}
        self._started = {t: seq for t, seq in self._started.items() if t in now_queued}
        count = 0
        for task in queued:
            if self.executors is not None and task.executor not in self.executors:
                continue
            if self._started.get(task.id) == task.last_seq:
                continue  # already started for this queueing
            queue = str(task.metadata.get(QUEUE_KEY) or self.options.queue)
            params = TaskInput(
                task.id,
                queue,
                heartbeat_timeout=self.options.heartbeat_timeout,
                turn_retries=self.options.turn_retries,
            )
            try:
                # Signal-with-start: starts the workflow, or wakes the one already running.
                await client.start_workflow(
                    WORKFLOW,
                    params,
                    id=workflow_id(task.id, self.options.prefix),
                    task_queue=self.workflow_queue,
                    start_signal=WAKE,
                )
            except Exception:  # Temporal unreachable for now: try again on the next pass
                continue
            self._started[task.id] = task.last_seq
            count += 1
        self.dispatched += count
        return count
