"""The workers on a store and their kind: plain (``orchestrate worker``, ``orchestrate serve``'s worker,
an :class:`orchestrate.engine.Engine` working) or ``temporal`` (``orchestrate worker --temporal``).

The two kinds must not share a store: a plain worker takes any queued task and declares a run lost when
its lease runs out, while a Temporal worker runs each task's turns where its workflow sends them and
leaves a dead worker's turn to Temporal's retry.  Together they would run a task where no workflow
expects it and recover each other's runs by different rules.  So each worker enters itself here when
it starts, and is refused (:class:`WorkerKindError`) while a live worker of the other kind is entered.

A worker's row lives until ``expires_at``, which its heartbeats move on, and is removed when it stops.
One that died on this machine (its pid gone) is forgotten at once; one on another machine when its row
expires.  Entering takes the store's change counter row first (store/clock.py) on Postgres, so two
workers of different kinds starting at the same instant cannot both get in.
"""

from __future__ import annotations

import os
import socket
import time

from sqlalchemy import Connection, delete, insert, select, update

from .errors import WorkerKindError
from .schema import store_clock, workers

__all__ = ["KINDS", "check", "enter", "leave", "seen"]

KINDS = ("plain", "temporal")
_HOST = socket.gethostname()
_OTHER = {"plain": "a Temporal worker (orchestrate worker --temporal)", "temporal": "a plain worker"}
_HOW = {
    "plain": "stop the Temporal workers first, or start this one with --temporal "
    "(orchestrate serve: --no-worker)",
    "temporal": "stop the plain workers first (orchestrate serve: --no-worker), or start this one "
    "without --temporal",
}


def _gone(name: str) -> bool:
    """Whether ``name`` (HOST:PID:...) was a worker on this machine whose process is gone."""
    parts = name.split(":")
    if len(parts) < 2 or parts[0] != _HOST or not parts[1].isdigit():
        return False  # another machine's: its row expires
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def check(conn: Connection, kind: str) -> None:
    """Raise :class:`WorkerKindError` if a live worker of the other kind than ``kind`` is entered."""
    if kind not in KINDS:
        raise ValueError(f"a worker's kind is one of {KINDS}, not {kind!r}")
    now = time.time()
    conn.execute(delete(workers).where(workers.c.expires_at < now))
    rows = conn.execute(select(workers.c.name, workers.c.kind, workers.c.expires_at)).all()
    dead = [r.name for r in rows if _gone(r.name)]
    if dead:
        conn.execute(delete(workers).where(workers.c.name.in_(dead)))
    other = [r for r in rows if r.kind != kind and r.name not in dead]
    if other:
        first = other[0]
        raise WorkerKindError(
            f"the store is worked by {_OTHER[kind]} ({first.name}"
            + (f" and {len(other) - 1} more" if len(other) > 1 else "")
            + f"; entered until {first.expires_at - now:.0f} s from now unless it keeps beating): plain and "
            f"Temporal workers cannot share a store; {_HOW[kind]}"
        )


def enter(conn: Connection, name: str, kind: str, ttl: float) -> None:
    """Enter worker ``name`` of ``kind`` for ``ttl`` seconds, or raise :class:`WorkerKindError`."""
    if conn.dialect.name == "postgresql":  # one worker enters at a time (SQLite: BEGIN IMMEDIATE)
        conn.execute(select(store_clock.c.id).where(store_clock.c.id == 1).with_for_update()).all()
    check(conn, kind)
    now = time.time()
    conn.execute(delete(workers).where(workers.c.name == name))
    conn.execute(insert(workers).values(name=name, kind=kind, started_at=now, expires_at=now + ttl))


def seen(conn: Connection, name: str, ttl: float) -> None:
    """Worker ``name`` is alive: keep its row for ``ttl`` seconds more."""
    conn.execute(update(workers).where(workers.c.name == name).values(expires_at=time.time() + ttl))


def leave(conn: Connection, name: str) -> None:
    """Worker ``name`` stopped."""
    conn.execute(delete(workers).where(workers.c.name == name))
