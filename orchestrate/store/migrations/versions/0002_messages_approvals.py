"""Follow-up messages waiting for a busy agent, and approvals waiting for any client's answer.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("delivered_run_id", sa.Integer, sa.ForeignKey("runs.id")),
        sa.Column("delivered_at", sa.Float),
    )
    op.create_index("ix_messages_task", "messages", ["task_id", "id"])
    op.create_table(
        "approvals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("request", sa.JSON, nullable=False),
        sa.Column("decision", sa.String(32)),
        sa.Column("reason", sa.Text),
        sa.Column("answered_by", sa.String(200)),
        sa.Column("answered_at", sa.Float),
        sa.Column("expires_at", sa.Float),
    )
    op.create_index("ix_approvals_open", "approvals", ["decision", "task_id"])


def downgrade() -> None:
    op.drop_table("approvals")
    op.drop_table("messages")
