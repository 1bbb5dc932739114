"""Where the store lives and how a connection to it is made: SQLite in WAL mode under
``$ORCHESTRATE_HOME`` by default, ``$ORCHESTRATE_DATABASE_URL`` when set, any SQLAlchemy URL otherwise.
Postgres (``postgresql://...``, with the ``postgres`` extra installed) is driven through psycopg 3 whatever
the URL names; its dialect-specific parts (row locks, lock timeouts, LISTEN/NOTIFY) are in postgres.py.
Schema changes go through Alembic, never ``create_all``."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import OperationalError, ProgrammingError

from .errors import StoreError, StoreVersionError, map_db_errors

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic costs about 0.3 s to import, on the path of every `orchestrate run` (which records itself in
# the store): it is imported only to migrate.  A store already at HEAD is told by one query.
# tests/test_store.py checks that HEAD is Alembic's own head.
HEAD = "0005"

__all__ = [
    "DATABASE_URL_ENV",
    "connect",
    "current_revision",
    "default_url",
    "downgrade",
    "head_revision",
    "home",
    "migrate",
    "normalize_url",
]

DATABASE_URL_ENV = "ORCHESTRATE_DATABASE_URL"
"""A store URL every process on the machine uses when none is given (a cluster's Postgres)."""

MIGRATIONS = Path(__file__).parent / "migrations"
BUSY_TIMEOUT = 5.0
"""Seconds a SQLite writer waits for another connection's lock before the write fails as busy."""


def home() -> Path:
    """$ORCHESTRATE_HOME, or ~/.orchestrate."""
    value = os.environ.get("ORCHESTRATE_HOME")
    return Path(value) if value else Path.home() / ".orchestrate"


def default_url() -> str:
    """The default store: ``$ORCHESTRATE_DATABASE_URL`` if set, else ``$ORCHESTRATE_HOME/store.db``."""
    return os.environ.get(DATABASE_URL_ENV) or f"sqlite:///{home() / 'store.db'}"


def normalize_url(url: str) -> str:
    """``postgres://`` and ``postgresql://`` (the forms libpq, Heroku-style services and most docs use)
    name psycopg 3, the driver the ``postgres`` extra installs; SQLAlchemy would pick psycopg2."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url.removeprefix(prefix)
    return url


def connect(url: str | None = None, *, busy_timeout: float = BUSY_TIMEOUT) -> Engine:
    """An engine for ``url`` (default: :func:`default_url`), its directory made, SQLite tuned."""
    url = normalize_url(url or default_url())
    if url.startswith("postgresql"):
        from .postgres import connect_postgres

        return connect_postgres(url, busy_timeout=busy_timeout)
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    path = url.split(":///", 1)[1] if ":///" in url else ""
    if path and path != ":memory:":
        with map_db_errors(f"creating the store's directory for {path}"):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            # The store holds what the raw logs hold (prompts, the agent's output), and those are
            # private (0600): the file is made private before SQLite opens it, and SQLite gives its
            # -wal and -shm files the database file's permissions.
            # A store made before this was 0644: it is made private too (when it is ours).
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
            try:
                with contextlib.suppress(OSError):
                    os.fchmod(fd, 0o600)
            finally:
                os.close(fd)
            for side in ("-wal", "-shm"):
                with contextlib.suppress(OSError):
                    Path(path + side).chmod(0o600)
    # A small pool: closing the last connection to a WAL database checkpoints and syncs it, which
    # would cost every call milliseconds.  Pooled connections hold no lock between transactions.
    engine = create_engine(url, pool_size=4, max_overflow=8, connect_args={"timeout": busy_timeout})
    event.listen(engine, "connect", _sqlite_pragmas)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy's "begin" event issue BEGIN itself (the driver's implicit BEGIN is deferred, and a
    # deferred reader that later writes can fail at once with "database is locked", ignoring the timeout).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # Set once, when the file is new: asking again takes a lock another writer may hold.
        if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable at each checkpoint; WAL keeps it consistent
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _sqlite_begin(conn: Any) -> None:
    # Every transaction that may write takes the write lock up front (waiting up to the busy timeout);
    # read-only ones ask for a deferred transaction with execution_options(readonly=True).
    if conn.get_execution_options().get("readonly"):
        conn.exec_driver_sql("BEGIN")
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _config(engine: Engine) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def head_revision() -> str:
    """The newest migration this code knows (asked of Alembic)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config(create_engine("sqlite://"))).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The migration the database is at (None: empty)."""
    with map_db_errors("reading the store's schema version"), engine.connect() as conn:
        try:
            reader = conn.execution_options(readonly=True)  # a deferred transaction: no write lock
            rows = reader.execute(text("SELECT version_num FROM alembic_version")).fetchall()
        except (OperationalError, ProgrammingError) as exc:
            text_ = str(exc).lower()
            if "no such table" in text_ or "does not exist" in text_:
                return None  # an empty store (SQLite / Postgres wording)
            raise
    return str(rows[0][0]) if len(rows) == 1 else None


def is_current(engine: Engine) -> bool:
    """Whether the database is at this code's schema (no migration to run)."""
    return current_revision(engine) == HEAD


def migrate(engine: Engine, revision: str = "head") -> None:
    """Upgrade the database to ``revision`` (default: the newest), one transaction for all steps."""
    _alembic(engine, "upgrade", revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Take the database back to ``revision`` (``"base"``: empty), to test or to roll back a release."""
    _alembic(engine, "downgrade", revision)


def _alembic(engine: Engine, direction: str, revision: str) -> None:
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    cfg = _config(engine)
    with map_db_errors(f"migrating the store ({direction} to {revision})"), engine.connect() as conn:
        # SQLite changes a table by copying it, dropping the old one and renaming the copy; with
        # foreign keys on, the drop would cascade into the rows that point at it (a task's labels).
        # The pragma only takes effect outside a transaction, so it is set on the bare connection,
        # and the keys are checked once the migration is committed.
        raw = conn.connection.dbapi_connection if engine.dialect.name == "sqlite" else None
        if raw is not None:
            raw.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                cfg.attributes["connection"] = conn
                current = MigrationContext.configure(conn).get_current_revision()
                if current is not None and not _known(cfg, current):
                    raise StoreVersionError(
                        f"the store is at schema {current}, which this version of orchestrate does not "
                        "know (a newer orchestrate wrote it)"
                    )
                (command.upgrade if direction == "upgrade" else command.downgrade)(cfg, revision)
            if raw is not None and (broken := raw.execute("PRAGMA foreign_key_check").fetchall()):
                raise StoreError(f"migrating the store left rows pointing nowhere: {broken[:5]}")
        finally:
            if raw is not None:
                raw.execute("PRAGMA foreign_keys=ON")


def _known(cfg: Config, revision: str) -> bool:
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        return ScriptDirectory.from_config(cfg).get_revision(revision) is not None
    except CommandError:
        return False
