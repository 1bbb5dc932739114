"""Reading rows into records, and the sequence counters every event insert goes through."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from sqlalchemy import Connection, Row, func, select, update

from .errors import NotFoundError
from .postgres import notify
from .records import Event, RunRecord, TaskRecord
from .schema import events, runs, task_deps, task_labels, tasks

__all__ = [
    "NewEvent",
    "insert_events",
    "read_changes",
    "read_events",
    "read_runs",
    "read_tasks",
    "task_event",
]

NewEvent = tuple[int, int | None, str, bytes | str, float]
"""(task id, run id or None, kind, JSON data, time) of an event to insert."""

_SUMS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def insert_events(conn: Connection, batch: Sequence[NewEvent]) -> list[tuple[int, int]]:
    """Insert ``batch`` in order, each taking the next number of its task's and its run's sequence;
    returns the (task id, seq) of each.  The counters are bumped by an UPDATE in this transaction, so a
    concurrent writer waits for the row (Postgres) or the database (SQLite) and numbers never repeat."""
    per_task: dict[int, int] = {}
    per_run: dict[int, int] = {}
    for task_id, run_id, *_ in batch:
        per_task[task_id] = per_task.get(task_id, 0) + 1
        if run_id is not None:
            per_run[run_id] = per_run.get(run_id, 0) + 1
    # Tasks before runs, each by ascending id: the one lock order of every transaction (postgres.py).
    next_task = {t: _bump(conn, tasks, t, per_task[t]) - per_task[t] for t in sorted(per_task)}
    next_run = {r: _bump(conn, runs, r, per_run[r]) - per_run[r] for r in sorted(per_run)}
    rows, keys = [], []
    for task_id, run_id, kind, data, ts in batch:
        next_task[task_id] += 1
        run_seq = None
        if run_id is not None:
            next_run[run_id] += 1
            run_seq = next_run[run_id]
        text = data.decode() if isinstance(data, bytes) else data
        rows.append(
            {"task_id": task_id, "seq": next_task[task_id], "run_id": run_id, "run_seq": run_seq}
            | {"ts": ts, "kind": kind, "data": text}
        )
        keys.append((task_id, next_task[task_id]))
    if rows:
        conn.execute(events.insert(), rows)
        notify(conn, per_task)
    return keys


def _bump(conn: Connection, table: Any, row_id: int, n: int) -> int:
    last = conn.execute(
        update(table)
        .where(table.c.id == row_id)
        .values(last_seq=table.c.last_seq + n)
        .returning(table.c.last_seq)
    ).scalar()
    if last is None:
        raise NotFoundError(f"no {table.name[:-1]} {row_id}")
    return int(last)


def task_event(conn: Connection, task_id: int, status: str, **data: Any) -> None:
    """Record that task ``task_id`` went to ``status`` (with why), in the caller's transaction."""
    body = {"status": status, **{k: v for k, v in data.items() if v is not None}}
    insert_events(conn, [(task_id, None, "state", orjson.dumps(body), time.time())])


def read_tasks(
    conn: Connection, where: Any = None, *, order: Any = None, limit: int | None = None
) -> list[TaskRecord]:
    query = select(tasks)
    if where is not None:
        query = query.where(where)
    query = query.order_by(*(order if order is not None else [tasks.c.id]))
    if limit is not None:
        query = query.limit(limit)
    found = list(conn.execute(query))
    ids = [r.id for r in found]
    labels = _grouped(
        conn, select(task_labels.c.task_id, task_labels.c.label).where(task_labels.c.task_id.in_(ids))
    )
    deps = _grouped(
        conn, select(task_deps.c.task_id, task_deps.c.depends_on).where(task_deps.c.task_id.in_(ids))
    )
    sums = _sums(conn, ids)
    return [_task(r, labels.get(r.id, []), deps.get(r.id, []), sums.get(r.id)) for r in found]


def read_changes(conn: Connection, after: int, limit: int) -> list[tuple[int, TaskRecord]]:
    """Tasks whose latest change is numbered after ``after`` (store/clock.py), with that number, in
    number order: what a board that has seen every change up to ``after`` has not seen yet."""
    found = read_tasks(conn, tasks.c.change_seq > after, order=[tasks.c.change_seq], limit=limit)
    if not found:
        return []
    query = select(tasks.c.id, tasks.c.change_seq).where(tasks.c.id.in_([t.id for t in found]))
    numbers = {int(i): int(n) for i, n in conn.execute(query)}
    return sorted(((numbers[t.id], t) for t in found), key=lambda pair: pair[0])


def _grouped(conn: Connection, query: Any) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for key, value in conn.execute(query):
        out.setdefault(key, []).append(value)
    return {k: sorted(v) for k, v in out.items()}


def _sums(conn: Connection, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    cols = [func.sum(runs.c[name]).label(name) for name in _SUMS]
    query = (
        select(runs.c.task_id, *cols, func.sum(runs.c.cost_usd).label("cost_usd"))
        .where(runs.c.task_id.in_(list(ids)))
        .group_by(runs.c.task_id)
    )
    return {
        row.task_id: {k: v for k, v in row._mapping.items() if k != "task_id"} for row in conn.execute(query)
    }


def _task(row: Row[Any], labels: list[str], deps: list[int], sums: dict[str, Any] | None) -> TaskRecord:
    # The change number is the board's (read_changes): a record a write returns is read before its
    # transaction numbers it, so the number is kept out of the record rather than shown stale.
    values = {k: v for k, v in row._mapping.items() if k != "change_seq"}
    values |= {"labels": labels, "depends_on": deps}
    if sums:
        values |= {k: (v or 0) for k, v in sums.items() if k in _SUMS} | {"cost_usd": sums["cost_usd"]}
    return TaskRecord(**values)


def read_runs(conn: Connection, where: Any) -> list[RunRecord]:
    return [
        RunRecord(**dict(r._mapping)) for r in conn.execute(select(runs).where(where).order_by(runs.c.id))
    ]


def read_events(conn: Connection, where: Any, order: Any, limit: int) -> list[Event]:
    query = select(events).where(where).order_by(order).limit(limit)
    return [
        Event(
            task_id=r.task_id,
            seq=r.seq,
            run_id=r.run_id,
            run_seq=r.run_seq,
            ts=r.ts,
            kind=r.kind,
            data=orjson.loads(r.data),
        )
        for r in conn.execute(query)
    ]
