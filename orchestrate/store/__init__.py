"""The durable store: tasks, their runs, and each run's sequence-numbered events.

SQLite in WAL mode under ``$ORCHESTRATE_HOME`` by default (``store.db``); any SQLAlchemy URL otherwise.
The schema is migrated by Alembic when the store opens.  See :class:`Store` for the operations and
:class:`EventWriter` for the batching writer the engine streams events through.
"""

from __future__ import annotations

from .database import connect, current_revision, default_url, downgrade, head_revision, home, migrate
from .errors import (
    AlreadyAnsweredError,
    NotFoundError,
    StoreBusyError,
    StoreError,
    StoreFullError,
    StoreReadOnlyError,
    StoreVersionError,
    WorkerKindError,
)
from .records import TERMINAL, ApprovalRecord, Event, Limits, RunRecord, TaskRecord, TaskSpec
from .store import RunEnd, Store
from .writer import EventWriter, Pace, WriteTrouble

__all__ = [
    "TERMINAL",
    "AlreadyAnsweredError",
    "ApprovalRecord",
    "Event",
    "EventWriter",
    "Limits",
    "NotFoundError",
    "Pace",
    "RunEnd",
    "RunRecord",
    "Store",
    "StoreBusyError",
    "StoreError",
    "StoreFullError",
    "StoreReadOnlyError",
    "StoreVersionError",
    "TaskRecord",
    "TaskSpec",
    "WorkerKindError",
    "WriteTrouble",
    "connect",
    "current_revision",
    "default_url",
    "downgrade",
    "head_revision",
    "home",
    "migrate",
]
