"""What crosses Temporal: the workflow's input and each turn's input and result.  Small on purpose: a
turn's entries and raw log records go to the store, never into workflow history (whose payloads are
capped at 2 MB and which every replay reads again)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ENDED", "TaskInput", "TurnInput", "TurnResult", "workflow_id"]

ENDED = frozenset({"done", "failed", "blocked", "cancelled", "lost"})
"""Task statuses after which the workflow returns (the store's TERMINAL; the workflow imports no store)."""

WORKFLOW = "orchestrate.task"
TURN = "orchestrate.turn"
CANCEL = "orchestrate.cancel"
WAKE = "wake"


def workflow_id(task_id: int, prefix: str = "orchestrate") -> str:
    """The one workflow of a task: its id, so that starting it twice starts it once."""
    return f"{prefix}-task-{task_id}"


@dataclass(frozen=True)
class TaskInput:
    task_id: int
    queue: str
    """The task queue of the workers that can reach the task's workspace: every turn runs there."""
    heartbeat_timeout: float = 30.0
    """Seconds without a heartbeat after which Temporal gives the turn to another worker."""
    turn_timeout: float = 24 * 3600.0
    turn_retries: int = 20
    """Temporal attempts per turn (a worker dying); the store's max_attempts still bounds the runs."""
    wait_min: float = 0.05
    wait_max: float = 2.0
    """Backoff between asks while the task waits (dependencies, limits); a ``wake`` signal cuts it."""


@dataclass(frozen=True)
class TurnInput:
    task_id: int


@dataclass(frozen=True)
class TurnResult:
    state: str
    """``ran`` (a run ended), ``waiting`` (not runnable yet) or ``ended`` (the task is over)."""
    status: str
    """The task's status afterwards."""
    run_id: int | None = None
    outcome: str | None = None
    session_id: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    worker: str | None = None
    reason: str | None = None
    notes: list[str] = field(default_factory=list)
