"""The store-wide change sequence: every transaction that changes tasks gives each of them the next
number of one counter (``store_clock``'s single row), taken as the transaction's last statement.

Why the last statement, under the row's lock: a number is only useful to a reader if no smaller number
can become visible after it.  A database sequence does not promise that (a writer that took 5 may commit
after one that took 6, and a board that saw 6 would skip 5 for good).  Here the counter's row lock is
held from taking the number to the commit, so the next writer gets its number only after this one has
committed: numbers become visible in order (on SQLite every write transaction is serial anyway).  Taken
last, after every task and run lock of the transaction, the counter never waits while holding anything
another writer of the counter waits for, so it adds no deadlock; it is held for one UPDATE and the commit.

Event appends (a run's output) do not change a task's number: they are counted by the task's own
sequence, and would otherwise make every writer of events queue on one row.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, bindparam, update

from .errors import StoreError
from .schema import store_clock, tasks

__all__ = ["changed", "forget", "stamp"]

_KEY = "orchestrate_changed_tasks"


def changed(conn: Connection, task_ids: Iterable[int]) -> None:
    """Note that this transaction changed ``task_ids``: they are numbered when it commits."""
    conn.info.setdefault(_KEY, set()).update(task_ids)


def forget(conn: Connection) -> None:
    """Drop what was noted (the connection goes back to the pool; a rolled back change has no number)."""
    conn.info.pop(_KEY, None)


def stamp(conn: Connection) -> None:
    """Number the tasks this transaction changed, in id order; call just before commit."""
    ids = sorted(conn.info.pop(_KEY, ()))
    if not ids:
        return
    query = (
        update(store_clock)
        .where(store_clock.c.id == 1)
        .values(last=store_clock.c.last + len(ids))
        .returning(store_clock.c.last)
    )
    last = conn.execute(query).scalar()
    if last is None:
        raise StoreError("the store's change counter (table store_clock) has no row: the store is damaged")
    first = int(last) - len(ids) + 1
    conn.execute(
        update(tasks).where(tasks.c.id == bindparam("tid")).values(change_seq=bindparam("n")),
        [{"tid": task_id, "n": n} for n, task_id in enumerate(ids, first)],
    )
