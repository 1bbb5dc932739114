"""Alembic's entry point for the store's migrations.  The store hands it an open connection through
``config.attributes["connection"]``; there is no alembic.ini and no URL here."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from orchestrate.store.schema import metadata


def _run(connection: Connection) -> None:
    # render_as_batch: SQLite cannot ALTER most things in place; batch mode copies the table instead.
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("the store's migrations run through orchestrate.store.database.migrate()")
_run(connection)
