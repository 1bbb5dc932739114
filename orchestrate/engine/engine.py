"""The engine a board embeds: submit and inspect tasks, follow their events from any offset, and (in
:meth:`Engine.work`) run the queue: claims by priority then age within the limits, leases renewed by
heartbeat, cancel requests from any process, and recovery of runs whose worker died.

Every store call runs in a worker thread, so the event loop never waits on the database; events are
written by the store's batching writer thread."""

from __future__ import annotations

import builtins
import functools
import os
import secrets
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import anyio

from ..approvals.base import ApprovalService
from ..entries import NormalizedEntry
from ..errors import OrchestrateError
from ..process.pipes import ShutdownPolicy
from ..registry import Registry, default_registry
from ..store import (
    AlreadyAnsweredError,
    ApprovalRecord,
    Event,
    EventWriter,
    Limits,
    RunRecord,
    Store,
    StoreBusyError,
    StoreError,
    TaskRecord,
    TaskSpec,
    home,
)
from ..workspace import Checkpoint, FileChange, commit_changes, list_checkpoints
from .heap import steady_heap
from .observers import Observers
from .procinfo import HOST, kill_group_if_same
from .rebuild import rebuild_entries
from .runner import LiveRun, RunSettings, Watchdogs, execute
from .workspaces import remove_task_workspace, rollback_task, task_diff, task_workspace

__all__ = ["Engine"]


def _takes_messages(live: LiveRun) -> bool:
    handle = live.handle
    return handle is not None and not live.cancel.is_set() and handle.capabilities.mid_execution_messages


T = TypeVar("T")


class Engine:
    """``async with Engine.open() as engine:`` then ``await engine.submit(...)``; run the queue with
    ``await engine.work()`` (until cancelled or :meth:`stop`), in this process or any other on the store."""

    stop_check = 1.0
    """How often (s) a worker reads the cancel and interrupt flags of its live runs, in one query: a
    request from any process takes effect within about this, whatever the lease.  On Postgres a request's
    NOTIFY wakes it at once, and this is only the fallback for a lost notification (times 5)."""

    subscribe_page = 200
    """Events :meth:`subscribe` reads from the store at a time (as serve's pollers do): a subscriber
    that is behind holds a page of them parsed, and a raw record can be a MiB."""

    def __init__(
        self,
        store: Store,
        *,
        limits: Limits | None = None,
        capacity: int = 4,
        lease: float = 30.0,
        poll: float = 0.2,
        registry: Registry | None = None,
        approvals: ApprovalService | None = None,
        executors: Sequence[str] | None = None,
        shutdown: ShutdownPolicy | None = None,
        log_dir: Path | None = None,
        watchdogs: Watchdogs | None = None,
        observers: Sequence[Any] = (),
        steer: bool = False,
    ) -> None:
        steady_heap()  # before the writer's thread starts (see heap.py)
        self.store = store
        self.limits = limits or Limits()
        self.capacity = capacity
        self.lease = lease
        self.poll = poll
        self.executors = executors
        self.steer = steer
        """Send follow-ups into a live agent at once when it takes messages mid-turn (else they wait
        for the turn to end and become the next turn)."""
        self.worker = f"{HOST}:{os.getpid()}:{secrets.token_hex(3)}"
        self.writer = EventWriter(store)
        self.live: dict[int, LiveRun] = {}
        """Runs this engine is executing, by run id."""
        self.errors: list[StoreError] = []
        """Store errors the worker loop met and went on past (the latest few)."""
        # No approval service given: requests wait in the store for any client (approve / deny).
        self._settings = RunSettings(
            registry or default_registry,
            approvals,
            log_dir or home() / "runs",
            shutdown,
            poll / 2,
            watchdogs or Watchdogs(),
            Observers(observers),
        )
        self._wake = anyio.Event()
        self._steer_wake = anyio.Event()
        self._stop = anyio.Event()
        self._idle = anyio.Event()
        self._owns_store = False
        self._entered = False

    @classmethod
    def open(cls, url: str | None = None, *, busy_timeout: float = 5.0, **options: Any) -> Engine:
        """An engine on the store at ``url`` (default: SQLite under $ORCHESTRATE_HOME)."""
        engine = cls(Store.open(url, busy_timeout=busy_timeout), **options)
        engine._owns_store = True
        return engine

    async def __aenter__(self) -> Engine:
        self.writer.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        await self._leave()
        await anyio.to_thread.run_sync(self.writer.close)
        if self._owns_store:
            self.store.close()

    # --- the API ------------------------------------------------------------------------------

    async def submit(self, prompt: str, executor: str, **spec: Any) -> TaskRecord:
        """Queue a task; ``spec`` takes the fields of :class:`orchestrate.store.TaskSpec`."""
        task = await self._call(self.store.submit, TaskSpec(prompt=prompt, executor=executor, **spec))
        self._wake.set()
        return task

    async def get(self, task_id: int) -> TaskRecord:
        return await self._call(self.store.get, task_id)

    async def list(self, **filters: Any) -> builtins.list[TaskRecord]:
        """Tasks, filtered by ``status``, ``label``, ``executor``; paged by ``limit`` and ``after_id``."""
        return await self._call(lambda: self.store.list_tasks(**filters))

    async def runs(self, task_id: int) -> builtins.list[RunRecord]:
        return await self._call(self.store.runs, task_id)

    async def rebuild(self, run_id: int) -> builtins.list[NormalizedEntry]:
        """A run's entries rebuilt from its raw log (the file, or the raw records stored with the
        run when the file is gone), in index order: the source of truth, whatever the stored
        patches say (a store that had to drop events, a normalizer fixed since)."""
        return await self._call(lambda: rebuild_entries(self.store, run_id, self._settings.registry))

    async def cancel(self, task_id: int) -> TaskRecord:
        """Cancel a task, wherever it runs: a queued one at once, a running one by its worker."""
        task = await self._call(self.store.cancel, task_id)
        for live in self.live.values():
            if live.task.id == task_id:
                live.cancel.set()
        return task

    async def interrupt(self, task_id: int) -> TaskRecord:
        """Interrupt the task's running turn, wherever it runs (the task goes on: see Store.interrupt)."""
        task = await self._call(self.store.interrupt, task_id)
        for live in self.live.values():
            if live.task.id == task_id:
                live.interrupt.set()
        return task

    async def retry(self, task_id: int) -> TaskRecord:
        task = await self._call(self.store.retry, task_id)
        self._wake.set()
        return task

    async def send(self, task_id: int, text: str) -> TaskRecord:
        """A follow-up message: a new turn of the task in the agent's session.  For a task whose agent
        is busy (or that waits in the queue) it is stored and sent when the turn ends done; a task that
        has ended starts a follow-up run at once.  Messages that wait are sent together, in order.
        A worker with ``steer=True`` sends a busy agent that takes messages mid-turn (Claude, Codex,
        ACP) the message at once instead.  Which it was is recorded: :meth:`messages` (``delivery``:
        ``steered`` or ``next_turn``) and a ``notice`` event when steered."""
        task, _, _ = await self._call(self.store.send, task_id, text)
        self._wake.set()
        self._steer_wake.set()
        return task

    async def messages(self, task_id: int) -> builtins.list[dict[str, Any]]:
        """The task's follow-up messages, in order, each with the run it went to and how."""
        return await self._call(self.store.messages, task_id)

    async def approvals(
        self, task_id: int | None = None, status: str | None = "open"
    ) -> builtins.list[ApprovalRecord]:
        """Approvals waiting for an answer (``status=None``: all), of one task or every task."""
        return await self._call(lambda: self.store.approvals(task_id=task_id, status=status))

    async def approve(self, approval_id: int, *, by: str = "engine API") -> ApprovalRecord:
        """Answer an open approval: allowed.  Raises :class:`AlreadyAnsweredError` if another client
        answered first (or the request was withdrawn): that answer stands."""
        return await self._answer(approval_id, "approved", None, by)

    async def deny(
        self, approval_id: int, reason: str = "denied", *, by: str = "engine API"
    ) -> ApprovalRecord:
        """Answer an open approval: refused, with ``reason`` for the agent.  First answer wins."""
        return await self._answer(approval_id, "denied", reason, by)

    async def _answer(self, approval_id: int, decision: str, reason: str | None, by: str) -> ApprovalRecord:
        won, record = await self._call(lambda: self.store.answer_approval(approval_id, decision, reason, by))
        if not won:
            raise AlreadyAnsweredError(record)
        return record

    async def subscribe(
        self,
        task_id: int | None = None,
        *,
        run_id: int | None = None,
        after: int = 0,
        follow: bool = True,
        kinds: Collection[str] | None = None,
    ) -> AsyncIterator[Event]:
        """A task's events after ``seq`` ``after`` (or a run's, after ``run_seq``): the stored ones, then
        live ones as they are stored, until the task (or run) has ended and everything is read.  To
        resume after a disconnect, pass the last ``seq`` (``run_seq``) seen.  ``kinds`` keeps only
        those kinds: ``{"state"}`` is the task's state changes (queued, running, waiting_approval,
        done, failed, blocked, cancelled, lost), each with its reason."""
        if (task_id is None) == (run_id is None):
            raise ValueError("subscribe to exactly one of a task and a run")
        # Postgres: woken by NOTIFY when any process stores events (polling stays, slower, as a fallback).
        notifier = self.store.notifier()
        while True:
            seen = notifier.version(task_id) if notifier is not None else 0
            read = functools.partial(
                self.store.events, task_id=task_id, run_id=run_id, after=after, limit=self.subscribe_page
            )
            page = await self._call(read)
            for event in page:
                after = event.seq if task_id is not None else event.run_seq or after
                if kinds is None or event.kind in kinds:
                    yield event
            if page:
                continue
            if not follow or await self._ended(task_id, run_id, after):
                return
            if notifier is not None:
                await notifier.wait(task_id, seen, self.poll * 5)
            else:
                await anyio.sleep(self.poll / 4)  # polling: the writer may be another process

    async def _ended(self, task_id: int | None, run_id: int | None, after: int) -> bool:
        if task_id is not None:
            task = await self._call(self.store.get, task_id)
            return task.finished and task.last_seq <= after
        assert run_id is not None
        run = await self._call(self.store.run, run_id)
        return run.status != "running" and run.last_seq <= after

    async def wait(self, task_id: int) -> TaskRecord:
        """Wait until the task has ended (done, failed, blocked, cancelled or lost); bound it with
        ``anyio.fail_after``.  It may be run by another process, so this polls the store."""
        while not (task := await self.get(task_id)).finished:  # noqa: ASYNC110
            await anyio.sleep(self.poll / 4)
        return task

    # --- workspaces ----------------------------------------------------------------------------

    async def checkpoints(self, task_id: int) -> builtins.list[Checkpoint]:
        """The checkpoints of the task's workspace, oldest first (see each run's ``checkpoint_start``
        and ``checkpoint_end`` for the turn they belong to)."""
        return await self._call(lambda: list_checkpoints(task_workspace(self.store, task_id)))

    async def diff(
        self, task_id: int, start: str | int = "base", end: str | int = "now", *, turn: int | None = None
    ) -> builtins.list[FileChange]:
        """Per-file unified diffs: the task's changes (base to now), between two checkpoints, or of
        one turn (``turn``: the task's Nth run)."""
        return await self._call(lambda: task_diff(self.store, task_id, start, end, turn))

    async def rollback(self, task_id: int, to: str | int) -> Checkpoint:
        """Put the task's files back as checkpoint ``to`` (a number, or ``base``) had them; refused
        while the task runs.  Returns the checkpoint of the files as they were (to undo it)."""
        return await self._call(lambda: rollback_task(self.store, task_id, to))

    async def commit(self, task_id: int, message: str, author: tuple[str, str] | None = None) -> str | None:
        """Commit the task's files on its branch (None: nothing to commit); the user merges or pushes it."""
        return await self._call(lambda: commit_changes(task_workspace(self.store, task_id), message, author))

    async def remove_workspace(self, task_id: int) -> None:
        """Remove the task's workspace and its checkpoints (refused while a run uses it)."""
        await self._call(lambda: remove_task_workspace(self.store, task_id))

    # --- the worker ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask :meth:`work` to return once its live runs have ended (it starts no new ones)."""
        self._stop.set()
        self._wake.set()

    async def work(self) -> None:
        """Run the queue until :meth:`stop` (or cancellation, which stops the live agents)."""
        self._stop = anyio.Event()
        await self.enter()
        try:
            await self._work()
        finally:
            with anyio.CancelScope(shield=True):
                await self._leave()

    async def enter(self) -> None:
        """Enter this worker on the store (done by :meth:`work`; early, to be refused before anything
        else): :class:`~orchestrate.store.WorkerKindError` while Temporal workers work the store (see
        store/workers.py)."""
        if not self._entered:
            # A store another process holds locked for a moment delays the start (bounded), as every
            # other write waits: only a refusal, or a lock that never ends, stops the worker.
            for delay in (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0, None):
                try:
                    await self._call(self.store.enter_worker, self.worker, "plain", self.lease)
                    break
                except StoreBusyError:
                    if delay is None:
                        raise
                    await anyio.sleep(delay)
            self._entered = True

    async def _leave(self) -> None:
        if self._entered:
            self._entered = False
            await self._guard(functools.partial(self.store.leave_worker, self.worker))

    async def _work(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._heartbeats)
            tg.start_soon(self._stop_requests)
            if self.steer:
                tg.start_soon(self._steering)
            while not self._stop.is_set():
                await self._recover()
                await self._fill(tg)
                with anyio.move_on_after(self.poll):
                    await self._wake.wait()
                self._wake = anyio.Event()
            while self.live:
                self._idle = anyio.Event()
                await self._idle.wait()
            tg.cancel_scope.cancel()

    async def _fill(self, tg: anyio.abc.TaskGroup) -> None:
        while len(self.live) < self.capacity and not self._stop.is_set():
            got = await self._guard(
                lambda: self.store.claim(self.worker, self.limits, self.lease, self.executors)
            )
            if got is None:
                return
            task, run = got
            live = self.live[run.id] = LiveRun(task, run)
            tg.start_soon(self._execute, live)

    async def _execute(self, live: LiveRun) -> None:
        try:
            await execute(self.store, self.writer, live, self._settings)
        finally:
            del self.live[live.run.id]
            self._wake.set()
            self._idle.set()

    async def _heartbeats(self) -> None:
        while True:
            await anyio.sleep(self.lease / 3)
            await self._guard(functools.partial(self.store.worker_seen, self.worker, self.lease))
            ids = list(self.live)
            held = await self._guard(functools.partial(self.store.heartbeat, self.worker, ids, self.lease))
            if held is None:
                continue  # the store is unavailable: try again; leases outlast a few misses
            for run_id in ids:
                live = self.live.get(run_id)
                if live is not None and run_id not in held:
                    live.lease_lost = True
                    live.cancel.set()

    async def _stop_requests(self) -> None:
        """Cancel and interrupt requests from any process reach the live runs within ``stop_check``
        (at once on Postgres, woken by the request's NOTIFY), not at the next heartbeat (lease/3)."""
        notifier = self.store.notifier()
        every = min(self.stop_check, self.lease / 3)  # never later than the heartbeat used to look
        while True:
            seen = notifier.control_version() if notifier is not None else 0
            if self.live:  # idle: no query at all
                tasks = [live.task.id for live in self.live.values()]
                found = await self._guard(functools.partial(self.store.stop_requests, tasks))
                cancel, interrupt = found or (set(), set())
                for live in list(self.live.values()):
                    if live.task.id in cancel:
                        live.cancel.set()
                    elif live.task.id in interrupt:
                        live.interrupt.set()
            if notifier is not None:
                await notifier.wait_control(seen, every * 5)
            else:
                await anyio.sleep(every)

    async def _steering(self) -> None:
        """Waiting follow-ups go into this worker's live agents that take messages mid-turn, at once
        (whichever process stored them: the store is polled, and :meth:`send` here wakes it)."""
        while True:
            with anyio.move_on_after(self.poll):
                await self._steer_wake.wait()
            self._steer_wake = anyio.Event()
            able = {live.task.id: live for live in self.live.values() if _takes_messages(live)}
            waiting = await self._guard(functools.partial(self.store.waiting_messages, builtins.list(able)))
            for task_id in waiting or ():
                await self._steer_into(able[task_id])

    async def _steer_into(self, live: LiveRun) -> None:
        taken = await self._guard(functools.partial(self.store.steer, live.run.id)) or []
        sent = 0
        try:
            for message_id, text in taken:
                assert live.handle is not None
                await live.handle.send_message(text)
                live.steered.append(message_id)
                sent += 1
        except (OrchestrateError, OSError) as exc:  # its input closed as the turn ended: the next turn
            rest = [m for m, _ in taken[sent:]]
            await self._guard(functools.partial(self.store.unsteer, live.run.id, rest, str(exc)))

    async def _recover(self) -> None:
        """Runs whose lease expired: kill what is left of their agents, mark them lost, retry."""
        expired = await self._guard(self.store.expired_runs) or []
        # Our own runs are alive whatever their lease says (a late heartbeat renews it).
        expired = [run for run in expired if run.id not in self.live]
        for run in expired:
            if run.worker and run.worker.split(":", 1)[0] == HOST and run.pid:
                kill_group_if_same(run.pid, run.pid_started)
            await self._guard(functools.partial(self.store.mark_lost, run.id, by=self.worker))
        if expired:
            self._wake.set()

    async def _guard(self, fn: Callable[[], T]) -> T | None:
        """A store call for the worker loop: a store error is remembered and the loop goes on."""
        try:
            return await self._call(fn)
        except StoreError as exc:
            self.errors = [*self.errors[-9:], exc]
            return None

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(lambda: fn(*args))
