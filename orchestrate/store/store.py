"""The store: tasks, runs and events behind one synchronous, database-neutral API.

Every method is one transaction and is safe to call from any thread (the async engine calls them through
worker threads, never on its event loop), and from any number of processes on any number of machines.
SQLite takes its write lock at BEGIN (see database.py); on Postgres each transaction locks the rows it
changes, tasks first, in ascending order (see postgres.py), claims skip rows another claimer holds, and
counting live runs against the limits is one step across workers (an advisory lock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, and_, exists, func, insert, or_, select, text, true, update
from sqlalchemy.pool import NullPool

from . import clock, database
from . import workers as worker_rows
from .errors import NotFoundError, StoreError, map_db_errors
from .postgres import CONTROL, EventNotifier, lock_runs, lock_tasks, notify, task_of_run
from .records import LIVE_RUN, TERMINAL, ApprovalRecord, Event, Limits, RunRecord, TaskRecord, TaskSpec
from .rows import NewEvent, insert_events, read_changes, read_events, read_runs, read_tasks, task_event
from .schema import approvals, events, messages, runs, store_clock, task_deps, task_labels, tasks

__all__ = ["RunEnd", "Store"]

_LIVE_TASK = ("running", "waiting_approval")
# A dependency that ended in one of these will never be done: its dependents are blocked.
_DEAD = ("failed", "blocked", "cancelled", "lost")


class RunEnd(dict[str, Any]):
    """Columns of a finished run (status, outcome, exit_code, error, error_code, session_id, token counts,
    cost_usd); a dict so the engine sets only what it knows."""


class Store:
    """Open with :meth:`open`; close with :meth:`close` (or use as a context manager)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._notifier: EventNotifier | None = None
        self._notifier_lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(cls, url: str | None = None, *, busy_timeout: float = database.BUSY_TIMEOUT) -> Store:
        """The store at ``url`` (default: SQLite under $ORCHESTRATE_HOME), migrated to this code's schema."""
        engine = database.connect(url, busy_timeout=busy_timeout)
        try:
            if not database.is_current(engine):
                database.migrate(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    def close(self) -> None:
        with self._notifier_lock:
            self._closed = True
            if self._notifier is not None:
                self._notifier.close()
        self.engine.dispose()
        if self.engine.dialect.name == "postgresql":
            # A closed store still answers (boards and tests read one after closing it), but keeps no
            # server connection open any more: each call's connection is closed when it returns.
            pool: Any = self.engine.pool
            self.engine.pool = NullPool(pool._creator, dialect=pool._dialect, _dispatch=pool.dispatch)

    def notifier(self) -> EventNotifier | None:
        """What wakes subscribers when another process (on any machine) stores events: Postgres's
        LISTEN/NOTIFY, started on first use.  None on SQLite, where subscribers poll by sequence."""
        if self.engine.dialect.name != "postgresql":
            return None
        with self._notifier_lock:
            if self._notifier is None and not self._closed:
                self._notifier = EventNotifier(self.engine)
            return self._notifier

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self, doing: str) -> Iterator[Connection]:
        with map_db_errors(doing), self.engine.begin() as conn:
            clock.forget(conn)
            try:
                yield conn
                clock.stamp(conn)  # the tasks it changed are numbered last, just before the commit
            finally:
                clock.forget(conn)

    @contextmanager
    def _read(self, doing: str, *, snapshot: bool = False) -> Iterator[Connection]:
        with map_db_errors(doing), self.engine.connect() as raw:
            conn = raw.execution_options(readonly=True)
            if snapshot and self.engine.dialect.name == "postgresql":
                # Every statement sees the same commits (SQLite's read transactions always do).
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    # --- tasks --------------------------------------------------------------------------------

    def submit(self, spec: TaskSpec) -> TaskRecord:
        """Store a new task, queued (or blocked at once if a dependency already failed)."""
        with self._write("submitting a task") as conn:
            return self._task(conn, _insert_task(conn, spec))

    def open_run(
        self, spec: TaskSpec, worker: str, lease: float, kind: str = "cli"
    ) -> tuple[TaskRecord, RunRecord]:
        """Record a run that a client starts itself (``orchestrate run``): a task that is running at
        once, outside the queue, leased to ``worker`` like any claimed run (so a client that dies
        leaves a run the next worker finds lost, not a ghost)."""
        with self._write("recording a run") as conn:
            task_id = _insert_task(conn, spec)
            task = self._task(conn, task_id)
            if task.status != "queued":
                raise StoreError(f"task {task_id} is {task.status}: {task.reason}")
            run = _start_run(conn, task, worker, lease, kind=kind, prompt=None, parent=None)
            return self._task(conn, task_id), run

    def get(self, task_id: int) -> TaskRecord:
        with self._read(f"reading task {task_id}") as conn:
            return self._task(conn, task_id)

    def list_tasks(
        self,
        *,
        status: str | Sequence[str] | None = None,
        label: str | None = None,
        executor: str | None = None,
        limit: int = 100,
        after_id: int = 0,
    ) -> list[TaskRecord]:
        """Tasks in id order (oldest first) after ``after_id``, filtered."""
        where = [tasks.c.id > after_id]
        if status is not None:
            where.append(tasks.c.status.in_([status] if isinstance(status, str) else list(status)))
        if executor is not None:
            where.append(tasks.c.executor == executor)
        if label is not None:
            where.append(exists().where(task_labels.c.task_id == tasks.c.id, task_labels.c.label == label))
        with self._read("listing tasks") as conn:
            return read_tasks(conn, and_(*where), limit=limit)

    def changes(self, after: int = 0, limit: int = 200) -> list[tuple[int, TaskRecord]]:
        """Tasks changed after the store-wide change number ``after``, each with its latest change's
        number, in number order.  Numbers become visible in order (store/clock.py), so a reader that
        goes on after the last number it got misses no change and gets none twice."""
        with self._read("reading the tasks' changes", snapshot=True) as conn:
            return read_changes(conn, after, limit)

    def changes_with_approvals(
        self, after: int, limit: int = 200
    ) -> tuple[list[tuple[int, TaskRecord]], list[ApprovalRecord]]:
        """``changes(after, limit)`` and the open approvals of the tasks it returns, as one snapshot.
        Opening an approval changes its task, so a reader that goes on by change number and looks at
        the changed tasks' open approvals sees every approval that is still open when read (approval
        ids alone would not do: on Postgres a smaller id can commit after a larger one is read)."""
        with self._read("reading the tasks' changes and approvals", snapshot=True) as conn:
            found = read_changes(conn, after, limit)
            return found, _open_approvals(conn, [t.id for _, t in found])

    def open_approvals_now(self) -> tuple[int, list[ApprovalRecord]]:
        """The newest change number and the approvals open at it, as one snapshot: where a reader of
        ``changes_with_approvals`` starts when what is already open is not news."""
        with self._read("reading the open approvals", snapshot=True) as conn:
            last = conn.execute(select(store_clock.c.last).where(store_clock.c.id == 1)).scalar()
            return int(last or 0), _open_approvals(conn, None)

    def last_change(self) -> int:
        """The newest change number committed (0: none yet)."""
        with self._read("reading the change counter") as conn:
            found = conn.execute(select(store_clock.c.last).where(store_clock.c.id == 1)).scalar()
        return int(found or 0)

    def runs(self, task_id: int) -> list[RunRecord]:
        with self._read(f"reading the runs of task {task_id}") as conn:
            return read_runs(conn, runs.c.task_id == task_id)

    def run(self, run_id: int) -> RunRecord:
        with self._read(f"reading run {run_id}") as conn:
            found = read_runs(conn, runs.c.id == run_id)
        if not found:
            raise NotFoundError(f"no run {run_id}")
        return found[0]

    def cancel(self, task_id: int, reason: str = "cancelled") -> TaskRecord:
        """Cancel a task: at once if it is not running; otherwise flag it for the worker that runs it
        (which may be another process) to stop the agent.  A finished task is left as it is."""
        with self._write(f"cancelling task {task_id}") as conn:
            lock_tasks(conn, [task_id])
            task = self._task(conn, task_id)
            if task.status in TERMINAL:
                return task
            if task.status in _LIVE_TASK:
                _set_task(conn, task_id, cancel_requested=True)
                notify(conn, [task_id], CONTROL)  # its worker looks now, not at its next heartbeat
            else:
                self._end_task(conn, task_id, "cancelled", reason=reason)
            return self._task(conn, task_id)

    def interrupt(self, task_id: int) -> TaskRecord:
        """Ask the worker running the task's turn (which may be another process, on another machine) to
        interrupt it the agent's own way: the turn ends, the task does not (its waiting follow-up messages
        are the next turn, in the same session; else it rests until one is sent).  Only a turn that is
        running can be interrupted; the request lapses when that turn ends."""
        with self._write(f"interrupting task {task_id}") as conn:
            lock_tasks(conn, [task_id])
            task = self._task(conn, task_id)
            if task.status not in _LIVE_TASK:
                raise StoreError(f"task {task_id} is {task.status}: only a running turn can be interrupted")
            if task.cancel_requested:
                raise StoreError(f"task {task_id} is being cancelled")
            _set_task(conn, task_id, interrupt_requested=True)
            notify(conn, [task_id], CONTROL)
            return self._task(conn, task_id)

    def stop_requests(self, task_ids: Sequence[int]) -> tuple[set[int], set[int]]:
        """Which of ``task_ids`` some client asked to cancel, and which to interrupt: one query by
        primary key, cheap enough for a worker to ask every second about all its live runs."""
        if not task_ids:
            return set(), set()
        flags = (tasks.c.id, tasks.c.cancel_requested, tasks.c.interrupt_requested)
        query = select(*flags).where(
            tasks.c.id.in_(list(task_ids)), or_(tasks.c.cancel_requested, tasks.c.interrupt_requested)
        )
        cancel: set[int] = set()
        interrupt: set[int] = set()
        with self._read("reading cancel and interrupt requests") as conn:
            for task_id, cancelled, _ in conn.execute(query):
                # A cancel outranks an interrupt (a cancelled task's turn ends anyway).
                (cancel if cancelled else interrupt).add(int(task_id))
        return cancel, interrupt

    def interrupt_requested(self, task_ids: Sequence[int]) -> set[int]:
        """Which of ``task_ids`` some client asked to interrupt the current turn of."""
        if not task_ids:
            return set()
        with self._read("reading interrupt requests") as conn:
            query = select(tasks.c.id).where(tasks.c.id.in_(list(task_ids)), tasks.c.interrupt_requested)
            return set(conn.execute(query).scalars())

    def retry(self, task_id: int) -> TaskRecord:
        """Queue a finished task again for one more attempt; dependents it had blocked wait for it again."""
        with self._write(f"retrying task {task_id}") as conn:
            lock_tasks(conn, [task_id])
            task = self._task(conn, task_id)
            if task.status not in TERMINAL or task.status == "done":
                raise StoreError(
                    f"task {task_id} is {task.status}: only a task that ended without success is retried"
                )
            _set_task(
                conn,
                task_id,
                status="queued",
                reason="retried",
                error=None,
                error_code=None,
                max_attempts=task.attempts + 1,
                cancel_requested=False,
            )
            task_event(conn, task_id, "queued", reason="retried")
            self._unblock(conn, task_id, "retried")
            return self._task(conn, task_id)

    def _unblock(self, conn: Connection, task_id: int, how: str) -> None:
        deps = _dependents(conn, task_id)
        lock_tasks(conn, deps)  # dependents have higher ids than the task: the order holds
        for dep in deps:
            if self._task(conn, dep).status == "blocked":
                _set_task(conn, dep, status="queued", reason=None)
                task_event(conn, dep, "queued", reason=f"task {task_id} was {how}")

    # --- follow-ups ---------------------------------------------------------------------------

    def send(self, task_id: int, text: str) -> tuple[TaskRecord, int, bool]:
        """Store a follow-up message for task ``task_id``; returns the task, the message's id, and
        whether it starts a turn now.  A task that has ended (done, failed, cancelled, lost) is queued
        again for a follow-up run that resumes its session with the message.  Otherwise the message
        waits: it is delivered as the next turn once a turn of the task ends done."""
        if not text.strip():
            raise StoreError("a follow-up message needs some text")
        with self._write(f"sending a message to task {task_id}") as conn:
            lock_tasks(conn, [task_id])
            task = self._task(conn, task_id)
            key: Any = conn.execute(
                insert(messages).values(task_id=task_id, created_at=time.time(), text=text)
            ).inserted_primary_key
            message_id = int(key[0]) if key else 0
            starts = task.status in TERMINAL and task.status != "blocked"
            if starts:
                why = f"follow-up message {message_id}"
                _set_task(
                    conn,
                    task_id,
                    status="queued",
                    reason=why,
                    error=None,
                    error_code=None,
                    follow_up=True,
                    cancel_requested=False,
                    max_attempts=task.attempts + task.attempts_per_turn,
                )
                task_event(conn, task_id, "queued", reason=why, follow_up=True)
                self._unblock(conn, task_id, "given a follow-up")
            return self._task(conn, task_id), message_id, starts

    def messages(self, task_id: int) -> list[dict[str, Any]]:
        """The task's follow-up messages, in order, with the run each was delivered to (None: waiting)
        and how (``delivery``): ``steered`` into a run that was already going when it was sent, or
        ``next_turn``, the prompt of a run started after it (None: waiting)."""
        with self._read(f"reading the messages of task {task_id}") as conn:
            query = (
                select(messages, runs.c.started_at.label("run_started_at"))
                .select_from(messages.outerjoin(runs, runs.c.id == messages.c.delivered_run_id))
                .where(messages.c.task_id == task_id)
                .order_by(messages.c.id)
            )
            found = []
            for r in conn.execute(query):
                row = dict(r._mapping)
                started = row.pop("run_started_at")
                row["delivery"] = (
                    None
                    if row["delivered_run_id"] is None
                    else "steered"
                    if started is not None and started < row["created_at"]
                    else "next_turn"
                )
                found.append(row)
            return found

    def waiting_messages(self, task_ids: Sequence[int]) -> set[int]:
        """Which of ``task_ids`` have follow-up messages waiting (one query, for a worker's poll)."""
        if not task_ids:
            return set()
        with self._read("looking for waiting messages") as conn:
            query = select(messages.c.task_id).where(
                messages.c.task_id.in_(list(task_ids)), messages.c.delivered_run_id.is_(None)
            )
            return {int(t) for (t,) in conn.execute(query.distinct())}

    def steer(self, run_id: int) -> list[tuple[int, str]]:
        """Deliver the task's waiting messages into live run ``run_id`` now (an agent that takes
        messages mid-turn): they are marked delivered to it, a notice event says so, and they are
        returned, in order, for the worker to send.  None are taken unless the run is still going and
        its turn is not being interrupted."""
        with self._write(f"steering messages into run {run_id}") as conn:
            task_id = task_of_run(conn, run_id)
            if task_id is None:
                raise NotFoundError(f"no run {run_id}")
            lock_tasks(conn, [task_id])
            lock_runs(conn, [run_id])
            status = read_runs(conn, runs.c.id == run_id)[0].status
            # A turn being interrupted takes nothing: a message sent with (or after) the interrupt is
            # the next turn, not part of the one about to stop.
            going = status == "running" and not self._task(conn, task_id).interrupt_requested
            waiting = _waiting_messages(conn, task_id) if going else []
            if waiting:
                ids = [m for m, _ in waiting]
                conn.execute(
                    update(messages)
                    .where(messages.c.id.in_(ids))
                    .values(delivered_run_id=run_id, delivered_at=time.time())
                )
                notice = f"follow-up message(s) {', '.join(map(str, ids))} steered into run {run_id} mid-turn"
                body = {"notice": notice, "delivery": "steered", "messages": ids}
                insert_events(conn, [(task_id, run_id, "notice", orjson.dumps(body), time.time())])
            return waiting

    def unsteer(self, run_id: int, message_ids: Sequence[int], why: str) -> None:
        """Messages :meth:`steer` took that the agent could not be given (its input closed as its turn
        ended): they wait again, for the next turn, and a notice event says so."""
        if not message_ids:
            return
        with self._write(f"returning messages of run {run_id}") as conn:
            found = conn.execute(
                update(messages)
                .where(messages.c.id.in_(list(message_ids)), messages.c.delivered_run_id == run_id)
                .values(delivered_run_id=None, delivered_at=None)
                .returning(messages.c.task_id)
            ).all()
            if found:
                ids = list(message_ids)
                notice = f"follow-up message(s) {', '.join(map(str, ids))} wait for the next turn ({why})"
                body = {"notice": notice, "delivery": "next_turn", "messages": ids}
                insert_events(conn, [(int(found[0][0]), run_id, "notice", orjson.dumps(body), time.time())])

    # --- approvals ----------------------------------------------------------------------------

    def open_approval(
        self, run_id: int, request: dict[str, Any], expires_at: float | None = None
    ) -> ApprovalRecord:
        """Store a permission request of run ``run_id`` for any client to answer; its task is
        ``waiting_approval`` until every open request of the run is answered."""
        with self._write(f"opening an approval for run {run_id}") as conn:
            lock_tasks(conn, [task_of_run(conn, run_id) or 0])
            run = read_runs(conn, runs.c.id == run_id)
            if not run or run[0].status not in LIVE_RUN:
                raise NotFoundError(f"no live run {run_id} to ask for")
            task_id = run[0].task_id
            key: Any = conn.execute(
                insert(approvals).values(
                    task_id=task_id,
                    run_id=run_id,
                    created_at=time.time(),
                    request=request,
                    status="open",
                    expires_at=expires_at,
                )
            ).inserted_primary_key
            approval_id = int(key[0]) if key else 0
            if self._task(conn, task_id).status == "running":
                _set_task(conn, task_id, status="waiting_approval")
            # Always a change of the task, even when it already waits: a feed of approvals (the
            # webhooks) follows tasks by their commit-ordered change number, not approvals by id
            # (ids become visible out of commit order on Postgres).
            clock.changed(conn, [task_id])
            task_event(
                conn,
                task_id,
                "waiting_approval",
                run_id=run_id,
                approval_id=approval_id,
                tool=request.get("tool_name"),
                command=request.get("command"),
            )
            return _approval(conn, approval_id)

    def answer_approval(
        self,
        approval_id: int,
        decision: str,
        reason: str | None = None,
        by: str = "unknown",
        answer: dict[str, Any] | None = None,
    ) -> tuple[bool, ApprovalRecord]:
        """Answer an open approval (``approved``, ``denied`` or ``timed_out``); the first answer wins.
        ``answer`` holds the rest of the decision (``updated_input``, ``for_session``, ``scope``,
        ``interrupt``); it is kept in the request's ``answer`` key, written by the same conditional
        UPDATE, so only the winning answer's details are stored.  Returns whether this answer was the
        one taken, and the approval as it now stands."""
        if decision not in ("approved", "denied", "timed_out"):
            raise StoreError(f"an approval is approved, denied or timed_out, not {decision!r}")
        with self._write(f"answering approval {approval_id}") as conn:
            lock_tasks(conn, [_approval(conn, approval_id).task_id])
            values: dict[str, Any] = {
                "status": "answered",
                "decision": decision,
                "reason": reason,
                "answered_by": by,
                "answered_at": time.time(),
            }
            if answer:
                values["request"] = _approval(conn, approval_id).request | {"answer": answer}
            won = conn.execute(
                update(approvals)
                .where(approvals.c.id == approval_id, approvals.c.status == "open")
                .values(**values)
            ).rowcount
            record = _approval(conn, approval_id)
            if won:
                clock.changed(conn, [record.task_id])
                self._resume_running(conn, record, f"approval {approval_id} {decision} by {by}")
            return bool(won), record

    def withdraw_approval(self, approval_id: int, why: str) -> bool:
        """Close an approval nobody answered (the agent stopped waiting); False if it was answered."""
        with self._write(f"withdrawing approval {approval_id}") as conn:
            lock_tasks(conn, [_approval(conn, approval_id).task_id])
            taken = conn.execute(
                update(approvals)
                .where(approvals.c.id == approval_id, approvals.c.status == "open")
                .values(status="withdrawn", reason=why, answered_at=time.time())
            ).rowcount
            if taken:
                clock.changed(conn, [_approval(conn, approval_id).task_id])
                self._resume_running(conn, _approval(conn, approval_id), f"approval {approval_id} withdrawn")
            return bool(taken)

    def approval(self, approval_id: int) -> ApprovalRecord:
        with self._read(f"reading approval {approval_id}") as conn:
            return _approval(conn, approval_id)

    def approvals(self, *, task_id: int | None = None, status: str | None = "open") -> list[ApprovalRecord]:
        """Approvals in id order, of one task or all, by status (None: any)."""
        where = []
        if task_id is not None:
            where.append(approvals.c.task_id == task_id)
        if status is not None:
            where.append(approvals.c.status == status)
        with self._read("listing approvals") as conn:
            query = select(approvals).where(and_(true(), *where)).order_by(approvals.c.id)
            return [ApprovalRecord(**dict(r._mapping)) for r in conn.execute(query)]

    def _resume_running(self, conn: Connection, approval: ApprovalRecord, why: str) -> None:
        still_open = conn.execute(
            select(func.count())
            .select_from(approvals)
            .where(approvals.c.run_id == approval.run_id, approvals.c.status == "open")
        ).scalar()
        task = self._task(conn, approval.task_id)
        if not still_open and task.status == "waiting_approval":
            _set_task(conn, task.id, status="running")
            task_event(conn, task.id, "running", reason=why, run_id=approval.run_id)

    # --- the queue ----------------------------------------------------------------------------

    def claim(
        self,
        worker: str,
        limits: Limits,
        lease: float,
        executors: Sequence[str] | None = None,
        *,
        task_id: int | None = None,
    ) -> tuple[TaskRecord, RunRecord] | None:
        """Take the next runnable task (highest priority, then oldest; every dependency done; within
        ``limits`` across all workers) and open a run of it leased to ``worker``.  None: nothing to do.

        ``task_id``: take that task only, if it is runnable within the limits and no runnable task of a
        higher priority waits (a backend with one workflow per task, where each task asks for itself)."""
        with self._write("claiming a task") as conn:
            task_id = _next_task(conn, limits, executors, only=task_id)
            if task_id is None:
                return None
            task = self._task(conn, task_id)
            previous = read_runs(conn, runs.c.task_id == task_id)
            parent = previous[-1].id if previous else None
            prompt: str | None
            if task.follow_up and (waiting := _waiting_messages(conn, task_id)):
                # A new turn: the messages that waited, in the agent's session.
                prompt = "\n\n".join(text for _, text in waiting)
                run = _start_run(conn, task, worker, lease, kind="follow_up", prompt=prompt, parent=parent)
                conn.execute(
                    update(messages)
                    .where(messages.c.id.in_([m for m, _ in waiting]))
                    .values(delivered_run_id=run.id, delivered_at=time.time())
                )
                _set_task(conn, task_id, follow_up=False)
            else:
                # A first attempt, or a retry of the last turn with the same prompt.
                last = previous[-1] if previous else None
                kind = last.kind if last is not None and last.kind == "follow_up" else "attempt"
                prompt = last.prompt if last is not None else None
                run = _start_run(conn, task, worker, lease, kind=kind, prompt=prompt, parent=parent)
            return self._task(conn, task_id), run

    def enter_worker(self, worker: str, kind: str, ttl: float) -> None:
        """Enter ``worker`` (``plain`` or ``temporal``) on the store for ``ttl`` seconds (its heartbeats
        extend it); :class:`WorkerKindError` if a live worker of the other kind is on it (workers.py)."""
        with self._write(f"entering worker {worker}") as conn:
            worker_rows.enter(conn, worker, kind, ttl)

    def check_worker_kind(self, kind: str) -> None:
        """:class:`WorkerKindError` if a live worker of the other kind than ``kind`` is on the store (what
        :meth:`enter_worker` would refuse; to refuse early, before starting anything)."""
        with self._write("checking the store's workers") as conn:
            worker_rows.check(conn, kind)

    def worker_seen(self, worker: str, ttl: float) -> None:
        """``worker`` is alive: keep it entered ``ttl`` seconds more."""
        with self._write(f"renewing worker {worker}") as conn:
            worker_rows.seen(conn, worker, ttl)

    def leave_worker(self, worker: str) -> None:
        """``worker`` stopped: a worker of the other kind may use the store now."""
        with self._write(f"removing worker {worker}") as conn:
            worker_rows.leave(conn, worker)

    def heartbeat(self, worker: str, run_ids: Sequence[int], lease: float) -> set[int]:
        """Extend ``worker``'s leases on ``run_ids``; returns the ids it still holds (a run another
        worker has since declared lost is not among them, and its agent must stop)."""
        if not run_ids:
            return set()
        now = time.time()
        held = and_(runs.c.id.in_(list(run_ids)), runs.c.worker == worker, runs.c.status.in_(LIVE_RUN))
        with self._write("renewing leases") as conn:
            lock_runs(conn, run_ids)
            conn.execute(update(runs).where(held).values(lease_expires_at=now + lease))
            return set(conn.execute(select(runs.c.id).where(held)).scalars())

    def set_process(
        self, run_id: int, pid: int | None, pid_started: str | None, raw_log: str | None = None
    ) -> None:
        """Record the agent process of a run (pid and kernel start time) and where its raw log is."""
        with self._write(f"recording the process of run {run_id}") as conn:
            values = {"pid": pid, "pid_started": pid_started, "raw_log": raw_log}
            conn.execute(update(runs).where(runs.c.id == run_id).values(**values))

    def set_workspace(self, task_id: int, workspace: dict[str, Any] | None) -> None:
        """Record the workspace made for a task (None: it has been removed)."""
        with self._write(f"recording the workspace of task {task_id}") as conn:
            _set_task(conn, task_id, workspace=workspace)

    def set_checkpoints(self, run_id: int, *, start: int | None = None, end: int | None = None) -> None:
        """Record the checkpoints a run's turn started (``start``) or ended (``end``) on."""
        values = {k: v for k, v in (("checkpoint_start", start), ("checkpoint_end", end)) if v is not None}
        if values:
            with self._write(f"recording the checkpoints of run {run_id}") as conn:
                conn.execute(update(runs).where(runs.c.id == run_id).values(**values))

    def set_session(self, run_id: int, session_id: str) -> None:
        """Record the agent's session as soon as it is known, so a retry after a crash can resume it."""
        with self._write(f"recording the session of run {run_id}") as conn:
            task_id = task_of_run(conn, run_id)
            if task_id is None:
                raise NotFoundError(f"no run {run_id}")
            lock_tasks(conn, [task_id])
            conn.execute(update(runs).where(runs.c.id == run_id).values(session_id=session_id))
            conn.execute(update(tasks).where(tasks.c.id == task_id).values(session_id=session_id))
            clock.changed(conn, [task_id])

    def queued(self, limit: int = 100) -> list[int]:
        """Ids of queued tasks in the order the queue would take them (priority, then age)."""
        with self._read("listing the queue") as conn:
            query = (
                select(tasks.c.id)
                .where(tasks.c.status == "queued")
                .order_by(tasks.c.priority.desc(), tasks.c.id)
                .limit(limit)
            )
            return [int(t) for t in conn.execute(query).scalars()]

    def cancel_requested(self, task_ids: Sequence[int]) -> set[int]:
        """Which of ``task_ids`` some client asked to cancel."""
        if not task_ids:
            return set()
        with self._read("reading cancel requests") as conn:
            query = select(tasks.c.id).where(tasks.c.id.in_(list(task_ids)), tasks.c.cancel_requested)
            return set(conn.execute(query).scalars())

    def finish_run(
        self,
        run_id: int,
        end: RunEnd,
        task_status: str,
        *,
        reason: str | None = None,
        notice: str | None = None,
    ) -> TaskRecord:
        """Close run ``run_id`` with ``end`` and move its task to ``task_status`` (``queued`` to retry),
        in one transaction; a task that fails for good blocks the tasks waiting for it."""
        with self._write(f"finishing run {run_id}") as conn:
            lock_tasks(conn, [task_of_run(conn, run_id) or 0])
            if task_status not in ("done", "queued"):
                _lock_downstream(conn, task_of_run(conn, run_id) or 0)  # tasks before the run
            run = read_runs(conn, runs.c.id == run_id)[0]
            live = and_(runs.c.id == run_id, runs.c.status.in_(LIVE_RUN))
            if not conn.execute(update(runs).where(live).values(ended_at=time.time(), **end)).rowcount:
                # Declared lost meanwhile (its worker missed its lease): the recovering worker owns the task.
                return self._task(conn, run.task_id)
            _set_task(conn, run.task_id, interrupt_requested=False)  # asked of this turn, which is over
            if end.get("session_id"):
                _set_task(conn, run.task_id, session_id=end["session_id"])
            if notice:
                _set_task(conn, run.task_id, notice=notice)
                insert_events(
                    conn, [(run.task_id, run_id, "notice", orjson.dumps({"notice": notice}), time.time())]
                )
            error = (
                {"error": end.get("error"), "error_code": end.get("error_code")}
                if task_status != "done"
                else {}
            )
            _withdraw_approvals(conn, run_id, f"run {run_id} ended")
            task = self._task(conn, run.task_id)
            waiting = _waiting_messages(conn, run.task_id) if task_status == "done" else []
            if waiting and not task.cancel_requested:
                # The turn is over and messages wait for it: they are the next turn, in this session.
                why = f"run {run_id} done; {len(waiting)} follow-up message(s) waiting"
                _set_task(
                    conn,
                    run.task_id,
                    status="queued",
                    reason=why,
                    follow_up=True,
                    max_attempts=task.attempts + task.attempts_per_turn,
                )
                task_event(conn, run.task_id, "queued", reason=why, run_id=run_id, follow_up=True)
            elif task_status == "queued":
                _set_task(conn, run.task_id, status="queued", reason=reason, cancel_requested=False, **error)
                task_event(conn, run.task_id, "queued", reason=reason, run_id=run_id)
            else:
                self._end_task(conn, run.task_id, task_status, reason=reason, run_id=run_id, **error)
            return self._task(conn, run.task_id)

    def expired_runs(self, now: float | None = None) -> list[RunRecord]:
        """Live runs whose lease ran out: their worker died or stalled."""
        now = time.time() if now is None else now
        with self._read("finding expired leases") as conn:
            return read_runs(conn, and_(runs.c.status.in_(LIVE_RUN), runs.c.lease_expires_at < now))

    def mark_lost(self, run_id: int, by: str) -> TaskRecord | None:
        """Declare an expired run lost and retry its task if attempts remain (its session is resumed);
        None if the run is not expired any more (its worker came back, or another worker took it)."""
        now = time.time()
        with self._write(f"recovering run {run_id}") as conn:
            task_id = task_of_run(conn, run_id) or 0
            lock_tasks(conn, [task_id])
            if task_id and _may_end(self._task(conn, task_id)):
                _lock_downstream(conn, task_id)  # the task may end: its downstream before the run
            taken = conn.execute(
                update(runs)
                .where(runs.c.id == run_id, runs.c.status.in_(LIVE_RUN), runs.c.lease_expires_at < now)
                .values(
                    status="lost",
                    ended_at=now,
                    error_code="lost",
                    error=f"the worker running it stopped renewing its lease; recovered by {by}",
                )
            ).rowcount
            if not taken:
                return None
            run = read_runs(conn, runs.c.id == run_id)[0]
            self._lost(conn, run)
            return self._task(conn, run.task_id)

    def take_over(self, task_id: int, by: str, why: str) -> list[RunRecord]:
        """Declare every live run of task ``task_id`` lost now, whatever its lease says, and retry the
        task if attempts remain (its session resumed): for a backend whose own failure detector (a
        Temporal heartbeat timeout) has already decided that the run's worker is gone.  Returns the runs
        taken over, so the caller can kill what is left of their agents.  The old worker, if it still
        lives, learns at its next heartbeat that it holds the run no more, and stops its agent."""
        now = time.time()
        with self._write(f"taking over task {task_id}") as conn:
            lock_tasks(conn, [task_id])
            if _may_end(self._task(conn, task_id)):
                _lock_downstream(conn, task_id)  # the task may end: its downstream before the runs
            live = read_runs(conn, and_(runs.c.task_id == task_id, runs.c.status.in_(LIVE_RUN)))
            for run in live:
                error = f"{why}; taken over by {by}"
                conn.execute(
                    update(runs)
                    .where(runs.c.id == run.id)
                    .values(status="lost", ended_at=now, error_code="lost", error=error)
                )
                self._lost(conn, read_runs(conn, runs.c.id == run.id)[0])
            return live

    def _lost(self, conn: Connection, run: RunRecord) -> None:
        """After ``run`` was marked lost: its approvals withdrawn, its task retried or ended."""
        task = self._task(conn, run.task_id)
        why = f"run {run.id} was lost ({run.worker} stopped)"
        _withdraw_approvals(conn, run.id, why)
        if task.cancel_requested:
            self._end_task(conn, task.id, "cancelled", reason=why, run_id=run.id)
        elif task.attempts < task.max_attempts:
            _set_task(conn, task.id, status="queued", reason=f"{why}; retrying")
            task_event(conn, task.id, "queued", reason=f"{why}; retrying", run_id=run.id)
        else:
            self._end_task(
                conn, task.id, "lost", reason=why, run_id=run.id, error=run.error, error_code="lost"
            )

    # --- events -------------------------------------------------------------------------------

    def append(self, batch: Sequence[NewEvent]) -> list[tuple[int, int]]:
        """Insert events in one transaction; returns each one's (task id, seq)."""
        with self._write(f"storing {len(batch)} events") as conn:
            return insert_events(conn, batch)

    def events(
        self, *, task_id: int | None = None, run_id: int | None = None, after: int = 0, limit: int = 1000
    ) -> list[Event]:
        """A task's events after its ``seq`` ``after``, or a run's after its ``run_seq``, in order."""
        if (task_id is None) == (run_id is None):
            raise ValueError("give exactly one of task_id and run_id")
        with self._read("reading events") as conn:
            if task_id is not None:
                return read_events(
                    conn, and_(events.c.task_id == task_id, events.c.seq > after), events.c.seq, limit
                )
            return read_events(
                conn, and_(events.c.run_id == run_id, events.c.run_seq > after), events.c.run_seq, limit
            )

    # --- helpers ------------------------------------------------------------------------------

    def _task(self, conn: Connection, task_id: int) -> TaskRecord:
        found = read_tasks(conn, tasks.c.id == task_id)
        if not found:
            raise NotFoundError(f"no task {task_id}")
        return found[0]

    def _end_task(
        self,
        conn: Connection,
        task_id: int,
        status: str,
        *,
        reason: str | None,
        run_id: int | None = None,
        **extra: Any,
    ) -> None:
        _set_task(conn, task_id, status=status, reason=reason, cancel_requested=False, **extra)
        task_event(conn, task_id, status, reason=reason, run_id=run_id, error=extra.get("error"))
        if status == "done":
            return
        # Every task downstream is locked first, all at once in ascending order (see _lock_downstream);
        # then each is blocked, depth first, saying which task stopped it.
        _lock_downstream(conn, task_id)
        frontier = [(task_id, status)]
        while frontier:
            upstream, up_status = frontier.pop()
            why = _blocked_reason(upstream, up_status)
            deps = _dependents(conn, upstream)
            lock_tasks(conn, deps)  # held already, unless submitted since _lock_downstream looked
            for dep in deps:
                if self._task(conn, dep).status == "queued":
                    _set_task(conn, dep, status="blocked", reason=why)
                    task_event(conn, dep, "blocked", reason=why)
                    frontier.append((dep, "blocked"))


def _insert_task(conn: Connection, spec: TaskSpec) -> int:
    deps = read_tasks(conn, tasks.c.id.in_(spec.depends_on)) if spec.depends_on else []
    missing = set(spec.depends_on) - {d.id for d in deps}
    if missing:
        raise NotFoundError(f"no task {min(missing)} to depend on")
    dead = [d for d in deps if d.status in _DEAD]
    status, reason = ("blocked", _blocked_reason(dead[0].id, dead[0].status)) if dead else ("queued", None)
    now = time.time()
    key: Any = conn.execute(
        insert(tasks).values(
            created_at=now,
            updated_at=now,
            prompt=spec.prompt,
            executor=spec.executor,
            executor_options=spec.executor_options,
            run_options=spec.run_options,
            cwd=str(spec.cwd),
            priority=spec.priority,
            metadata=spec.metadata,
            status=status,
            reason=reason,
            max_attempts=spec.max_attempts,
            attempts_per_turn=spec.max_attempts,
            attempts=0,
            cancel_requested=False,
            follow_up=False,
            last_seq=0,
        )
    ).inserted_primary_key
    task_id = int(key[0]) if key else 0
    clock.changed(conn, [task_id])
    if spec.labels:
        conn.execute(insert(task_labels), [{"task_id": task_id, "label": lb} for lb in spec.labels])
    if spec.depends_on:
        rows = [{"task_id": task_id, "depends_on": d} for d in sorted(set(spec.depends_on))]
        conn.execute(insert(task_deps), rows)
    task_event(conn, task_id, status, reason=reason)
    return task_id


def _start_run(
    conn: Connection,
    task: TaskRecord,
    worker: str,
    lease: float,
    *,
    kind: str,
    prompt: str | None,
    parent: int | None,
) -> RunRecord:
    """Open a run of ``task`` leased to ``worker`` and mark the task running, in the caller's transaction."""
    now = time.time()
    key = conn.execute(
        insert(runs).values(
            task_id=task.id,
            attempt=task.attempts + 1,
            parent_run_id=parent,
            kind=kind,
            status="running",
            created_at=now,
            started_at=now,
            worker=worker,
            lease_expires_at=now + lease,
            resume_token=task.session_id,
            prompt=prompt,
            input_tokens=0,
            output_tokens=0,
            cache_read_tokens=0,
            cache_write_tokens=0,
            last_seq=0,
        )
    ).inserted_primary_key
    assert key is not None
    run_id = int(key[0])
    # An interrupt asked of an earlier turn is not this one's.
    _set_task(
        conn, task.id, status="running", reason=None, attempts=task.attempts + 1, interrupt_requested=False
    )
    task_event(conn, task.id, "running", run_id=run_id, attempt=task.attempts + 1, worker=worker, kind=kind)
    return read_runs(conn, runs.c.id == run_id)[0]


def _waiting_messages(conn: Connection, task_id: int) -> list[tuple[int, str]]:
    query = (
        select(messages.c.id, messages.c.text)
        .where(messages.c.task_id == task_id, messages.c.delivered_run_id.is_(None))
        .order_by(messages.c.id)
    )
    return [(int(m), str(t)) for m, t in conn.execute(query)]


def _withdraw_approvals(conn: Connection, run_id: int, why: str) -> None:
    """Close the run's open approvals: nobody's answer can reach the agent any more."""
    conn.execute(
        update(approvals)
        .where(approvals.c.run_id == run_id, approvals.c.status == "open")
        .values(status="withdrawn", reason=why, answered_at=time.time())
    )


def _open_approvals(conn: Connection, task_ids: list[int] | None) -> list[ApprovalRecord]:
    """Open approvals in id order, of ``task_ids`` (None: of every task)."""
    where = [approvals.c.status == "open"]
    if task_ids is not None:
        if not task_ids:
            return []
        where.append(approvals.c.task_id.in_(task_ids))
    query = select(approvals).where(*where).order_by(approvals.c.id)
    return [ApprovalRecord(**dict(r._mapping)) for r in conn.execute(query)]


def _approval(conn: Connection, approval_id: int) -> ApprovalRecord:
    row = conn.execute(select(approvals).where(approvals.c.id == approval_id)).first()
    if row is None:
        raise NotFoundError(f"no approval {approval_id}")
    return ApprovalRecord(**dict(row._mapping))


def _set_task(conn: Connection, task_id: int, **values: Any) -> None:
    conn.execute(update(tasks).where(tasks.c.id == task_id).values(updated_at=time.time(), **values))
    clock.changed(conn, [task_id])


def _lock_downstream(conn: Connection, task_id: int) -> None:
    """Lock every task downstream of ``task_id`` (its dependents, theirs, ...) in one ascending pass, for
    a transaction about to end ``task_id``.  Locking them level by level as the cascade reaches them
    took a higher id before a lower one (a deep branch before a shallow one), and a writer ending one of
    those tasks at the same time, holding the lower and wanting the higher, deadlocked with it.  Called
    before the transaction touches a run, which comes after every task in the lock order."""
    if conn.dialect.name != "postgresql":
        return  # SQLite: one writer at a time, no row locks
    found: set[int] = set()
    frontier = [task_id]
    while frontier:
        deps = [d for d in _dependents_of(conn, frontier) if d not in found]
        found.update(deps)
        frontier = deps
    lock_tasks(conn, found)


def _dependents_of(conn: Connection, task_ids: list[int]) -> list[int]:
    query = select(task_deps.c.task_id).where(task_deps.c.depends_on.in_(task_ids)).distinct()
    return list(conn.execute(query).scalars())


def _dependents(conn: Connection, task_id: int) -> list[int]:
    return list(conn.execute(select(task_deps.c.task_id).where(task_deps.c.depends_on == task_id)).scalars())


def _may_end(task: TaskRecord) -> bool:
    """Whether losing ``task``'s run ends it (cancelled, or no attempt left): see Store._lost."""
    return task.cancel_requested or task.attempts >= task.max_attempts


def _blocked_reason(task_id: int, status: str) -> str:
    return f"dependency task {task_id} {'is blocked' if status == 'blocked' else 'ended ' + status}"


def _next_task(
    conn: Connection, limits: Limits, executors: Sequence[str] | None, only: int | None = None
) -> int | None:
    if conn.dialect.name == "postgresql":
        # Counting live runs and claiming must be one step across workers (SQLite's BEGIN IMMEDIATE
        # already makes it so); any fixed key serves.
        conn.execute(text("SELECT pg_advisory_xact_lock(7310010)"))
    live = tasks.c.status.in_(_LIVE_TASK)
    by_executor: dict[str, int] = dict(
        conn.execute(select(tasks.c.executor, func.count()).where(live).group_by(tasks.c.executor)).all()
    )
    if limits.total is not None and sum(by_executor.values()) >= limits.total:
        return None
    full_executors = [e for e, n in limits.per_executor.items() if by_executor.get(e, 0) >= n]
    full_labels = []
    if limits.per_label:
        by_label: dict[str, int] = dict(
            conn.execute(
                select(task_labels.c.label, func.count())
                .join(tasks, tasks.c.id == task_labels.c.task_id)
                .where(live, task_labels.c.label.in_(list(limits.per_label)))
                .group_by(task_labels.c.label)
            ).all()
        )
        full_labels = [lb for lb, n in limits.per_label.items() if by_label.get(lb, 0) >= n]
    dep = tasks.alias()  # (Core's alias: the ORM's `aliased` loaded all of sqlalchemy.orm for it)
    unmet = (
        select(task_deps.c.task_id)
        .join(dep, dep.c.id == task_deps.c.depends_on)
        .where(task_deps.c.task_id == tasks.c.id, dep.c.status != "done")
    )
    query = select(tasks.c.id).where(tasks.c.status == "queued", ~exists(unmet))
    if full_executors:
        query = query.where(tasks.c.executor.not_in(full_executors))
    if full_labels:
        query = query.where(
            ~exists().where(task_labels.c.task_id == tasks.c.id, task_labels.c.label.in_(full_labels))
        )
    if executors is not None:
        query = query.where(tasks.c.executor.in_(list(executors)))
    if only is not None:
        # That task, unless a runnable one of a higher priority comes first.
        mine = select(tasks.c.priority).where(tasks.c.id == only).scalar_subquery()
        query = query.where(or_(tasks.c.id == only, tasks.c.priority > mine))
    query = query.order_by(tasks.c.priority.desc(), tasks.c.id).limit(1)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True, of=tasks, key_share=True)
    found = conn.execute(query).scalar()
    if found is None or (only is not None and found != only):
        return None
    return int(found)
