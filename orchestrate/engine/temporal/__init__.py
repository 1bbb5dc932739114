"""The engine on Temporal (the ``temporal`` extra): a workflow per task, one activity per agent turn, run
by ``orchestrate worker --temporal ADDRESS`` on the machines that hold the workspaces.  The store (SQLite
on one machine, Postgres across several) still holds the tasks, runs, events and approvals: every board,
``orchestrate tasks / follow / approve / send / cancel`` work the same on this backend."""

from __future__ import annotations

from .activities import TurnActivities, reap, reap_dead_workers
from .connect import connect
from .shapes import TaskInput, TurnInput, TurnResult, workflow_id
from .worker import QUEUE_KEY, TemporalOptions, TemporalWorker
from .workflow import TaskWorkflow

__all__ = [
    "QUEUE_KEY",
    "TaskInput",
    "TaskWorkflow",
    "TemporalOptions",
    "TemporalWorker",
    "TurnActivities",
    "TurnInput",
    "TurnResult",
    "connect",
    "reap",
    "reap_dead_workers",
    "workflow_id",
]
