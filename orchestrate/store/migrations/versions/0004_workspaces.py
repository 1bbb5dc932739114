"""Workspaces: a task remembers the workspace made for it (a git worktree or a copy: where it is, its
branch, base, ports and setup), and a run the checkpoints its turn started and ended on.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("workspace", sa.JSON))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("checkpoint_start", sa.Integer))
        batch.add_column(sa.Column("checkpoint_end", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("checkpoint_end")
        batch.drop_column("checkpoint_start")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("workspace")
