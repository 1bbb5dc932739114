"""The store's tables, in SQLAlchemy Core so the same schema lives in SQLite or Postgres.

Migrations (``migrations/versions``) create and change these tables; this module is what the code reads
and writes, and a test checks that the two agree.  Times are seconds since the epoch (a float), which
both databases order and compare the same way.  JSON columns hold plain objects and lists.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    false,
)

__all__ = [
    "approvals",
    "events",
    "messages",
    "metadata",
    "runs",
    "store_clock",
    "task_deps",
    "task_labels",
    "tasks",
    "workers",
]

metadata = MetaData()

# A task: what to do, how urgently, after what.  ``last_seq`` is the task's event counter: every event of
# the task (its own state changes and those of its runs) takes the next number, allocated by an UPDATE in
# the transaction that inserts the event, so numbers never repeat and readers never see one go back.
tasks = Table(
    "tasks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("prompt", Text, nullable=False),
    Column("executor", String(100), nullable=False),
    Column("executor_options", JSON, nullable=False),
    Column("run_options", JSON, nullable=False),
    Column("cwd", Text, nullable=False),
    Column("priority", Integer, nullable=False, default=0),
    Column("metadata", JSON, nullable=False),
    Column("status", String(32), nullable=False),
    Column("reason", Text),
    Column("error", Text),
    Column("error_code", String(64)),
    Column("notice", Text),
    Column("max_attempts", Integer, nullable=False, default=1),
    Column("attempts", Integer, nullable=False, default=0),
    Column("session_id", Text),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("last_seq", Integer, nullable=False, default=0),
    # The next run delivers the task's waiting messages as a new turn (resuming its session).
    Column("follow_up", Boolean, nullable=False, default=False, server_default=false()),
    # Attempts each turn gets (the submitted max_attempts); a follow-up turn starts a fresh budget.
    Column("attempts_per_turn", Integer, nullable=False, default=1, server_default="1"),
    # The workspace made for the task (orchestrate.workspace.WorkspaceInfo as JSON); None: it runs in cwd.
    Column("workspace", JSON),
    # The store-wide number of the task's latest change (from ``store_clock``): what the board resumes after.
    Column("change_seq", Integer, nullable=False, default=0, server_default="0"),
    # A client asked to interrupt the current turn (not the task); cleared when that turn ends.
    Column("interrupt_requested", Boolean, nullable=False, default=False, server_default=false()),
    Index("ix_tasks_queue", "status", "priority", "id"),
    Index("ix_tasks_change_seq", "change_seq"),
)

# The workers on the store now, each of a kind (``plain``: orchestrate worker, serve's worker, an Engine;
# ``temporal``: orchestrate worker --temporal): the two kinds run and recover tasks by different rules,
# so a worker of one kind refuses a store a live worker of the other kind works.  A row lives until
# ``expires_at`` (moved on by the worker's heartbeats), or until its worker says it is leaving.
workers = Table(
    "workers",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
)

# One row (id 1): the last change number given to a task.  A transaction that changes tasks takes the
# next numbers from it just before it commits, holding the row's lock to the commit, so changes commit
# in the order of their numbers: a reader that saw number N has seen every change numbered below N.
store_clock = Table(
    "store_clock",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("last", Integer, nullable=False),
)

task_labels = Table(
    "task_labels",
    metadata,
    Column("task_id", Integer, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("label", String(200), primary_key=True),
    Index("ix_task_labels_label", "label"),
)

task_deps = Table(
    "task_deps",
    metadata,
    Column("task_id", Integer, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("depends_on", Integer, ForeignKey("tasks.id"), primary_key=True),
    Index("ix_task_deps_depends_on", "depends_on"),
)

# A run: one attempt, or one follow-up turn, of a task.  ``worker`` holds its lease until
# ``lease_expires_at``; ``pid`` with ``pid_started`` (the kernel's start time of that pid) names the
# agent process so recovery never kills a reused pid.
runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", Integer, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("parent_run_id", Integer, ForeignKey("runs.id")),
    Column("kind", String(32), nullable=False),
    Column("status", String(32), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float),
    Column("ended_at", Float),
    Column("worker", String(200)),
    Column("lease_expires_at", Float),
    Column("pid", Integer),
    Column("pid_started", String(64)),
    Column("exit_code", Integer),
    Column("outcome", String(32)),
    Column("error", Text),
    Column("error_code", String(64)),
    Column("session_id", Text),
    Column("resume_token", Text),
    Column("input_tokens", Integer, nullable=False, default=0),
    Column("output_tokens", Integer, nullable=False, default=0),
    Column("cache_read_tokens", Integer, nullable=False, default=0),
    Column("cache_write_tokens", Integer, nullable=False, default=0),
    Column("cost_usd", Float),
    Column("raw_log", Text),
    Column("last_seq", Integer, nullable=False, default=0),
    # What this run was asked, when it is not the task's prompt (a follow-up turn's messages).
    Column("prompt", Text),
    # The workspace checkpoints (their numbers) this run's turn started and ended on.
    Column("checkpoint_start", Integer),
    Column("checkpoint_end", Integer),
    Index("ix_runs_task", "task_id", "id"),
    Index("ix_runs_live", "status", "lease_expires_at"),
)

# Events: immutable rows.  ``seq`` is the task's sequence (what a task subscriber resumes after);
# ``run_seq`` the run's own (what a run subscriber resumes after).  Kinds: ``raw`` (one raw log record,
# as its JSON line), ``patch`` (one entry patch), ``state`` (the task changed state), ``notice``.
events = Table(
    "events",
    metadata,
    Column("task_id", Integer, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE")),
    Column("run_seq", Integer),
    Column("ts", Float, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("data", Text, nullable=False),
    Index("ix_events_run", "run_id", "run_seq", unique=True),
)

# Follow-up messages for a task, delivered in order when its agent can take them.
messages = Table(
    "messages",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", Integer, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("text", Text, nullable=False),
    Column("delivered_run_id", Integer, ForeignKey("runs.id")),
    Column("delivered_at", Float),
    Index("ix_messages_task", "task_id", "id"),
)

# Approvals waiting for an answer from any client; the first answer wins (an UPDATE ... WHERE
# status = 'open'), the rest are told it was already answered.  ``status``: open, answered, or
# withdrawn (the run ended, or the agent stopped waiting, before anyone answered).
approvals = Table(
    "approvals",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", Integer, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("request", JSON, nullable=False),
    Column("decision", String(32)),
    Column("reason", Text),
    Column("answered_by", String(200)),
    Column("answered_at", Float),
    Column("expires_at", Float),
    Column("status", String(16), nullable=False, default="open", server_default="open"),
    Index("ix_approvals_open", "status", "task_id"),
)
