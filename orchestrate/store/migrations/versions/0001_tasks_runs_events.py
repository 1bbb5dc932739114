"""Tasks, their labels and dependencies, runs, and sequence-numbered events.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("executor", sa.String(100), nullable=False),
        sa.Column("executor_options", sa.JSON, nullable=False),
        sa.Column("run_options", sa.JSON, nullable=False),
        sa.Column("cwd", sa.Text, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("metadata", sa.JSON, nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("error_code", sa.String(64)),
        sa.Column("notice", sa.Text),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("session_id", sa.Text),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("last_seq", sa.Integer, nullable=False),
    )
    op.create_index("ix_tasks_queue", "tasks", ["status", "priority", "id"])
    op.create_table(
        "task_labels",
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("label", sa.String(200), primary_key=True),
    )
    op.create_index("ix_task_labels_label", "task_labels", ["label"])
    op.create_table(
        "task_deps",
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("depends_on", sa.Integer, sa.ForeignKey("tasks.id"), primary_key=True),
    )
    op.create_index("ix_task_deps_depends_on", "task_deps", ["depends_on"])
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("parent_run_id", sa.Integer, sa.ForeignKey("runs.id")),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float),
        sa.Column("ended_at", sa.Float),
        sa.Column("worker", sa.String(200)),
        sa.Column("lease_expires_at", sa.Float),
        sa.Column("pid", sa.Integer),
        sa.Column("pid_started", sa.String(64)),
        sa.Column("exit_code", sa.Integer),
        sa.Column("outcome", sa.String(32)),
        sa.Column("error", sa.Text),
        sa.Column("error_code", sa.String(64)),
        sa.Column("session_id", sa.Text),
        sa.Column("resume_token", sa.Text),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, nullable=False),
        sa.Column("cache_read_tokens", sa.Integer, nullable=False),
        sa.Column("cache_write_tokens", sa.Integer, nullable=False),
        sa.Column("cost_usd", sa.Float),
        sa.Column("raw_log", sa.Text),
        sa.Column("last_seq", sa.Integer, nullable=False),
    )
    op.create_index("ix_runs_task", "runs", ["task_id", "id"])
    op.create_index("ix_runs_live", "runs", ["status", "lease_expires_at"])
    op.create_table(
        "events",
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE")),
        sa.Column("run_seq", sa.Integer),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_index("ix_events_run", "events", ["run_id", "run_seq"], unique=True)


def downgrade() -> None:
    op.drop_table("events")
    op.drop_table("runs")
    op.drop_table("task_deps")
    op.drop_table("task_labels")
    op.drop_table("tasks")
