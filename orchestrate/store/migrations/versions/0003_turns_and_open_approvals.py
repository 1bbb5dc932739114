"""Follow-up turns and approvals any client answers.

A task remembers whether its next run delivers its waiting messages (``follow_up``) and how many
attempts each turn gets (``attempts_per_turn``, what it was submitted with); a run keeps the prompt it
was given when that is not the task's own (a follow-up message); an approval has a ``status`` (open,
answered, withdrawn) that the first answer moves on, in one conditional UPDATE.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("follow_up", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("attempts_per_turn", sa.Integer, nullable=False, server_default="1"))
    op.execute("UPDATE tasks SET attempts_per_turn = max_attempts")
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("prompt", sa.Text))
    op.drop_index("ix_approvals_open", table_name="approvals")
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("status", sa.String(16), nullable=False, server_default="open"))
    # Rows answered before this revision are answered.
    op.execute("UPDATE approvals SET status = 'answered' WHERE decision IS NOT NULL")
    op.create_index("ix_approvals_open", "approvals", ["status", "task_id"])


def downgrade() -> None:
    op.drop_index("ix_approvals_open", table_name="approvals")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("status")
    op.create_index("ix_approvals_open", "approvals", ["decision", "task_id"])
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("prompt")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("attempts_per_turn")
        batch.drop_column("follow_up")
