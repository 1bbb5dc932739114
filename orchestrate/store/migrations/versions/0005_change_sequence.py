"""A store-wide change sequence, interrupt requests, and the workers on the store.

``tasks.change_seq``: the number of the task's latest change, from one counter for the whole store
(the single row of ``store_clock``), so a board that read every change up to N resumes after N and
misses nothing and sees nothing twice, however many writers there are.  Existing tasks are numbered in
the order the board used until now (``updated_at``, then id).

``tasks.interrupt_requested``: a client asked to interrupt the task's current turn (the agent's own
way, its session kept); the worker running it, in any process, acts on it and the flag is cleared when
the turn ends.

``workers``: the workers on the store now and their kind (plain or Temporal), so a worker of one kind
refuses a store that a live worker of the other kind works.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("change_seq", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("interrupt_requested", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.create_index("ix_tasks_change_seq", ["change_seq"])
    clock = op.create_table(
        "store_clock",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("last", sa.Integer, nullable=False),
    )
    conn = op.get_bind()
    ordered = conn.execute(sa.text("SELECT id FROM tasks ORDER BY updated_at, id")).scalars().all()
    if ordered:
        conn.execute(
            sa.text("UPDATE tasks SET change_seq = :n WHERE id = :id"),
            [{"n": n, "id": task_id} for n, task_id in enumerate(ordered, 1)],
        )
    op.bulk_insert(clock, [{"id": 1, "last": len(ordered)}])
    op.create_table(
        "workers",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("workers")
    op.drop_table("store_clock")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_index("ix_tasks_change_seq")
        batch.drop_column("interrupt_requested")
        batch.drop_column("change_seq")
