"""Errors of the store, and the one place database exceptions become them.

    OrchestrateError
    └── StoreError                  the store could not do what was asked
        ├── StoreBusyError          another connection holds the database's write lock
        ├── StoreFullError          the disk (or the file size limit) has no room
        ├── StoreReadOnlyError      the database file or its directory cannot be written
        ├── StoreVersionError       the database's schema is newer or older than this code
        ├── NotFoundError           no task, run or approval by that id
        ├── AlreadyAnsweredError    an approval another client answered first (or that was withdrawn)
        └── WorkerKindError         a worker of the other kind (plain or Temporal) works the store

The busy, full and read-only errors are *transient* for the engine: a run keeps going, its events wait
in memory (bounded), and the task says what happened.  The raw log on disk stays the source of truth.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy import exc as sa_exc

from ..errors import OrchestrateError

__all__ = [
    "AlreadyAnsweredError",
    "NotFoundError",
    "StoreBusyError",
    "StoreError",
    "StoreFullError",
    "StoreReadOnlyError",
    "StoreVersionError",
    "WorkerKindError",
    "map_db_errors",
]


class StoreError(OrchestrateError):
    """The store could not do what was asked; ``code`` names why, for the task's error."""

    code = "store_error"


class StoreBusyError(StoreError):
    code = "store_busy"


class StoreFullError(StoreError):
    code = "store_full"


class StoreReadOnlyError(StoreError):
    code = "store_read_only"


class StoreVersionError(StoreError):
    code = "store_version"


class WorkerKindError(StoreError):
    """A plain worker on a store Temporal workers work, or the other way round: both would run its tasks
    (and recover each other's runs) by different rules."""

    code = "worker_kind_conflict"


class NotFoundError(StoreError):
    code = "not_found"


class AlreadyAnsweredError(StoreError):
    """The approval was answered by someone else first (or withdrawn); ``approval`` says how."""

    code = "already_answered"

    def __init__(self, approval: Any) -> None:
        how = (
            f"withdrawn ({approval.reason})"
            if approval.status == "withdrawn"
            else f"already answered: {approval.decision} by {approval.answered_by}"
        )
        super().__init__(f"approval {approval.id} was {how}")
        self.approval = approval


# SQLite's messages (sqlite3 has no error codes before 3.11's sqlite_errorname on every driver), and
# Postgres's SQLSTATE classes for the same conditions.
_MATCHES: list[tuple[type[StoreError], tuple[str, ...]]] = [
    (
        StoreBusyError,
        (
            "database is locked",
            "database table is locked",
            "lock timeout",
            "55p03",
            "deadlock detected",
            "connection refused",
            "server closed the connection",
            "terminating connection",
        ),
    ),
    (
        StoreFullError,
        ("database or disk is full", "disk i/o error", "no space left", "file too large", "53100"),
    ),
    (StoreReadOnlyError, ("readonly database", "read-only", "unable to open database", "25006")),
]


# Postgres's SQLSTATE codes (psycopg's ``exc.sqlstate``) that mean the same as the messages above.  A
# deadlock or a serialization failure is busy too: the transaction was rolled back whole and may be tried
# again; a dropped or refused connection (class 08, the server shutting down) is a store unavailable for
# now, which the engine rides out like a locked SQLite file.
_STATES: dict[str, type[StoreError]] = {
    "40P01": StoreBusyError,  # deadlock_detected
    "40001": StoreBusyError,  # serialization_failure
    "55P03": StoreBusyError,  # lock_not_available (lock_timeout)
    "57P01": StoreBusyError,  # admin_shutdown
    "57P03": StoreBusyError,  # cannot_connect_now (starting up)
    "53100": StoreFullError,  # disk_full
    "54000": StoreFullError,  # program_limit_exceeded
    "25006": StoreReadOnlyError,  # read_only_sql_transaction (a standby)
}


def classify(exc: BaseException) -> type[StoreError]:
    """The store error an exception from the database driver means."""
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str):
        if state in _STATES:
            return _STATES[state]
        if state.startswith("08"):
            return StoreBusyError
    text = str(exc).lower()
    for cls, needles in _MATCHES:
        if any(n in text for n in needles):
            return cls
    return StoreError


@contextlib.contextmanager
def map_db_errors(doing: str) -> Iterator[None]:
    """Translate driver and OS errors raised while ``doing`` into :class:`StoreError` subclasses."""
    try:
        yield
    except (sa_exc.DBAPIError, OSError) as exc:
        original = getattr(exc, "orig", None) or exc
        cls = classify(original)
        raise cls(f"{doing}: {_short(original)}") from exc


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
