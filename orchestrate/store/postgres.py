"""What the store does differently on Postgres, where writers are other processes on other machines and
nothing serializes them but the rows they lock.

SQLite takes one write lock per transaction (``BEGIN IMMEDIATE``), so every writer waits for the last.
Postgres locks rows, which lets writers of different tasks go at once, and which deadlocks two writers that
take the same rows in opposite orders (the event writer bumping a task's counter then its run's, while the
run's end updates the run then the task).  So every transaction here takes its locks in one order: the
tasks it touches, by ascending id (a dependent always has a higher id than what it waits for), then their
runs by ascending id, then approvals and messages.  :func:`lock_tasks` and :func:`lock_runs` take them up
front; on SQLite they do nothing.  A deadlock that still happens is a :class:`StoreBusyError`, which callers
already retry.

Event delivery: every transaction that inserts events also sends ``NOTIFY orchestrate_events, '<task id>'``
(delivered at commit, to every listening connection on any machine); :class:`EventNotifier` listens and
wakes subscribers, who read the new events by sequence number as before.  A lost notification costs only
latency: subscribers still poll, less often.  A cancel or interrupt request sends ``NOTIFY
orchestrate_control, '<task id>'``, which wakes the workers (:meth:`EventNotifier.control_version`) to read
the flags of their live runs at once, rather than at their next heartbeat.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from typing import Any

import anyio
from sqlalchemy import Connection, Engine, create_engine, select, text

from .errors import StoreError
from .schema import runs, tasks

__all__ = ["CHANNEL", "CONTROL", "EventNotifier", "connect_postgres", "lock_runs", "lock_tasks", "notify"]

CHANNEL = "orchestrate_events"
CONTROL = "orchestrate_control"  # a task's cancel or interrupt was requested: its worker must look now


def connect_postgres(url: str, *, busy_timeout: float) -> Engine:
    """An engine for a ``postgresql+psycopg://`` URL.  A row lock waited on longer than ``busy_timeout``
    fails the statement (``lock_timeout``), as SQLite's busy timeout does, so no writer hangs on a stuck
    peer; the error is a :class:`StoreBusyError`."""
    try:
        import psycopg  # noqa: F401  (only to say clearly what is missing)
    except ImportError as exc:
        raise StoreError(
            "the store's URL names Postgres, whose driver is not installed: "
            "pip install 'agent-orchestrate[postgres]'"
        ) from exc
    timeout_ms = max(1, int(busy_timeout * 1000))
    return create_engine(
        url,
        pool_pre_ping=True,  # a server restarted, or a connection a proxy dropped, is found before use
        pool_size=5,
        max_overflow=15,
        connect_args={"options": f"-c lock_timeout={timeout_ms}", "connect_timeout": 10},
    )


def _is_postgres(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def lock_tasks(conn: Connection, task_ids: Iterable[int]) -> None:
    """Lock the rows of ``task_ids`` in ascending order for the rest of the transaction (Postgres).
    ``FOR NO KEY UPDATE``: the lock an UPDATE takes, which does not stop inserts that reference the row."""
    ids = sorted(set(task_ids))
    if ids and _is_postgres(conn):
        query = select(tasks.c.id).where(tasks.c.id.in_(ids)).order_by(tasks.c.id)
        conn.execute(query.with_for_update(key_share=True)).all()


def lock_runs(conn: Connection, run_ids: Iterable[int]) -> None:
    """Lock the rows of ``run_ids`` in ascending order (Postgres); after the tasks they belong to."""
    ids = sorted(set(run_ids))
    if ids and _is_postgres(conn):
        query = select(runs.c.id).where(runs.c.id.in_(ids)).order_by(runs.c.id)
        conn.execute(query.with_for_update(key_share=True)).all()


def task_of_run(conn: Connection, run_id: int) -> int | None:
    """The task of ``run_id`` (which never changes, so it is read without a lock)."""
    found = conn.execute(select(runs.c.task_id).where(runs.c.id == run_id)).scalar()
    return None if found is None else int(found)


def notify(conn: Connection, task_ids: Iterable[int], channel: str = CHANNEL) -> None:
    """Tell listeners on every machine that ``task_ids`` have new events (or, on :data:`CONTROL`, a
    cancel or interrupt request), when this transaction commits."""
    if not _is_postgres(conn):
        return
    ids = sorted(set(task_ids))
    query = text("SELECT pg_notify(:channel, t::text) FROM unnest(CAST(:ids AS integer[])) AS t")
    conn.execute(query, {"channel": channel, "ids": ids})


class EventNotifier:
    """One listening connection per store, in a thread, counting notifications per task.

    A subscriber takes :meth:`version` before it reads, and after a read that found nothing waits in
    :meth:`wait` for the version to move (or for its timeout, then reads anyway).  A notification that
    arrives between the read and the wait has already moved the version, so nothing is missed.  While the
    connection is down (the server restarts) every waiter is woken when it comes back, to read again."""

    def __init__(self, engine: Engine, *, check: float = 0.01) -> None:
        self.engine = engine
        self.check = check
        self.received = 0
        self.listening = threading.Event()
        self._versions: dict[int, int] = {}
        self._any = 0
        self._control = 0
        self._reconnects = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="orchestrate-store-listen", daemon=True)
        self._thread.start()

    def version(self, task_id: int | None = None) -> int:
        """How many notifications ``task_id`` (None: any task) has had; compare with a later value."""
        with self._lock:
            return self._any if task_id is None else self._versions.get(task_id, 0) + self._reconnects

    def control_version(self) -> int:
        """How many cancel or interrupt requests (of any task) were heard, plus reconnects."""
        with self._lock:
            return self._control + self._reconnects

    async def wait_control(self, since: int, within: float) -> bool:
        """Wait up to ``within`` s for :meth:`control_version` to pass ``since``; True if it did."""
        deadline = time.monotonic() + within
        while self.control_version() == since:
            if time.monotonic() >= deadline:
                return False
            await anyio.sleep(self.check)
        return True

    async def wait(self, task_id: int | None, since: int, within: float) -> bool:
        """Wait up to ``within`` s for :meth:`version` to pass ``since``; True if it did.  It looks at a
        counter in memory, never at the database, so many subscribers cost no queries while idle."""
        deadline = time.monotonic() + within
        while self.version(task_id) == since:
            if time.monotonic() >= deadline:
                return False
            await anyio.sleep(self.check)
        return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                self._listen()
                backoff = 0.1
            except Exception:  # the server went away or refused us: try again, and wake everyone then
                self.listening.clear()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _listen(self) -> None:
        raw = self.engine.raw_connection()
        driver: Any = raw.driver_connection
        raw.detach()  # ours for good: a pooled connection must not be handed out while listening
        try:
            driver.autocommit = True
            driver.execute(f"LISTEN {CHANNEL}")
            driver.execute(f"LISTEN {CONTROL}")
            with self._lock:
                self._reconnects += 1  # whatever was sent while we were not listening: read again
                self._any += 1
            self.listening.set()
            while not self._stop.is_set():
                for note in driver.notifies(timeout=0.5):
                    if note.channel == CONTROL:
                        with self._lock:
                            self._control += 1
                    else:
                        self._received(note.payload)
        finally:
            with contextlib.suppress(Exception):
                driver.close()

    def _received(self, payload: str) -> None:
        with self._lock:
            self.received += 1
            self._any += 1
            with contextlib.suppress(ValueError):
                task_id = int(payload)
                self._versions[task_id] = self._versions.get(task_id, 0) + 1
