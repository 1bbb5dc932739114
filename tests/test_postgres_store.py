"""The store's tests again, on a real Postgres (a throwaway cluster per test session, a fresh database per
test), plus what only Postgres has: its own migrations, URLs, lock timeouts, and LISTEN/NOTIFY.

The shared tests are imported from test_store.py and collected here a second time; the ``store`` fixture of
this module gives them a Postgres store instead of a SQLite file."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from orchestrate.store import (
    Limits,
    RunEnd,
    Store,
    StoreBusyError,
    StoreError,
    StoreVersionError,
    connect,
    current_revision,
    default_url,
    downgrade,
    head_revision,
    migrate,
)
from orchestrate.store.database import normalize_url
from orchestrate.store.schema import metadata

from .services import Postgres
from .test_store import (  # noqa: F401  (collected here again, on Postgres)
    revisions,
    spec,
    test_an_expired_lease_is_lost_then_retried_with_its_session,
    test_cancel_queued_at_once_and_running_by_request,
    test_dependencies_wait_and_a_failure_blocks_everything_downstream,
    test_events_after_an_offset_are_exactly_the_rest,
    test_limits_per_executor_label_and_total,
    test_list_filters,
    test_one_live_run_per_task_whatever_is_asked_of_it,
    test_priority_then_age_over_200_tasks,
    test_submit_validates_and_stores_everything,
)


@pytest.fixture
def store(postgres: Postgres) -> Iterator[Store]:
    with Store.open(postgres.database()) as s:
        yield s


def columns(engine: Any) -> set[tuple[str, str]]:
    found = inspect(engine)
    return {(t, c["name"]) for t in found.get_table_names() for c in found.get_columns(t)}


def test_upgrade_from_empty_matches_the_schema_the_code_uses(postgres: Postgres) -> None:
    engine = connect(postgres.empty_database())
    assert current_revision(engine) is None
    migrate(engine)
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
        assert diff == [], diff
    engine.dispose()


def test_every_migration_goes_down_and_up_again(postgres: Postgres) -> None:
    engine = connect(postgres.empty_database())
    chain = revisions()
    for i, revision in enumerate(chain):
        previous = chain[i - 1] if i else "base"
        migrate(engine, revision)
        after = columns(engine)
        downgrade(engine, previous)
        assert current_revision(engine) == (None if previous == "base" else previous)
        assert columns(engine) < after
        migrate(engine, revision)
        assert columns(engine) == after
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_data_survives_a_round_trip_of_the_newest_migration(postgres: Postgres) -> None:
    url = postgres.database()
    with Store.open(url) as s:
        task = s.submit(spec("keep me", labels=["a"]))
        _, run = s.claim("w", Limits(), 60)  # type: ignore[misc]
        s.open_approval(run.id, {"tool_name": "Bash"})
    engine = connect(url)
    downgrade(engine, revisions()[-2])
    migrate(engine)
    engine.dispose()
    with Store.open(url) as s:
        assert s.get(task.id).prompt == "keep me" and s.get(task.id).labels == ["a"]
        assert [a.status for a in s.approvals()] == ["open"]


def test_a_store_from_a_newer_version_is_refused(postgres: Postgres) -> None:
    url = postgres.database()
    engine = connect(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(StoreVersionError, match="9999"):
        Store.open(url)


def test_plain_postgres_urls_and_the_environment_choose_the_store(
    postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres.database()
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    assert normalize_url(plain) == url
    assert normalize_url(url.replace("postgresql+psycopg://", "postgres://")) == url
    assert normalize_url("sqlite:///x.db") == "sqlite:///x.db"
    monkeypatch.setenv("ORCHESTRATE_DATABASE_URL", plain)
    assert default_url() == plain
    with Store.open() as s:  # no URL given: the environment's
        assert s.engine.dialect.name == "postgresql"
        task = s.submit(spec("from the environment"))
    with Store.open(plain) as s:
        assert s.get(task.id).prompt == "from the environment"


def test_a_missing_server_is_a_clear_busy_error() -> None:
    from .services import free_port

    with pytest.raises(StoreBusyError, match="reading the store's schema version"):
        Store.open(f"postgresql://nobody@127.0.0.1:{free_port()}/none")


def test_a_row_held_past_the_lock_timeout_is_a_busy_error_and_nothing_is_half_done(
    postgres: Postgres,
) -> None:
    url = postgres.database()
    with Store.open(url, busy_timeout=0.2) as s:
        task = s.submit(spec())
        holder = connect(url)
        with holder.begin() as conn:
            conn.execute(text("SELECT * FROM tasks WHERE id = :t FOR UPDATE"), {"t": task.id})
            started = time.monotonic()
            with pytest.raises(StoreBusyError, match="cancelling task"):
                s.cancel(task.id)
            assert time.monotonic() - started < 3
        holder.dispose()
        assert s.get(task.id).status == "queued"  # the failed cancel left nothing behind
        assert s.cancel(task.id).status == "cancelled"


def test_a_deadlock_is_a_busy_error_the_caller_may_retry(postgres: Postgres) -> None:
    """Two transactions locking two tasks in opposite orders: Postgres kills one; the store says busy
    (not a generic failure), which the engine and the event writer retry."""
    url = postgres.database()
    with Store.open(url) as s:
        a, b = s.submit(spec()).id, s.submit(spec()).id
    engine = connect(url)
    errors: list[BaseException] = []
    barrier = threading.Barrier(2, timeout=10)

    def cross(first: int, second: int) -> None:
        from orchestrate.store.errors import map_db_errors

        try:
            with map_db_errors("crossing"), engine.begin() as conn:
                conn.execute(text("UPDATE tasks SET priority = 1 WHERE id = :t"), {"t": first})
                barrier.wait()
                conn.execute(text("UPDATE tasks SET priority = 1 WHERE id = :t"), {"t": second})
        except StoreError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=cross, args=pair) for pair in ((a, b), (b, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    engine.dispose()
    assert len(errors) == 1 and isinstance(errors[0], StoreBusyError), errors
    assert "deadlock" in str(errors[0])


def test_listeners_on_another_connection_are_woken_by_new_events(postgres: Postgres, tmp_path: Path) -> None:
    import anyio

    url = postgres.database()
    with Store.open(url) as reader, Store.open(url) as writer:
        notifier = reader.notifier()
        assert notifier is not None and notifier.listening.wait(10)
        task = writer.submit(spec())
        other = writer.submit(spec())

        async def main() -> tuple[bool, bool, float]:
            before = notifier.version(task.id)
            quiet = await notifier.wait(task.id, before, 0.3)  # nothing yet for this task
            writer.append([(other.id, None, "notice", "{}", 0.0)])  # another task's event
            other_only = await notifier.wait(task.id, before, 0.3)
            threading.Timer(0.2, lambda: writer.append([(task.id, None, "notice", '{"n": 1}', 0.0)])).start()
            started = time.monotonic()
            woken = await notifier.wait(task.id, before, 10)
            return quiet or other_only, woken, time.monotonic() - started

        spurious, woken, waited = anyio.run(main)
        assert not spurious and woken and waited < 5
        assert [e.data for e in reader.events(task_id=task.id) if e.kind == "notice"] == [{"n": 1}]
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as lite:
        assert lite.notifier() is None  # SQLite: subscribers poll by sequence


def test_claims_skip_a_task_another_worker_holds(postgres: Postgres) -> None:
    url = postgres.database()
    with Store.open(url) as s:
        first, second = s.submit(spec()), s.submit(spec())
        holder = connect(url)
        with holder.begin() as conn:
            conn.execute(text("SELECT * FROM tasks WHERE id = :t FOR UPDATE"), {"t": first.id})
            got = s.claim("w", Limits(), 60)
            assert got is not None and got[0].id == second.id
        holder.dispose()
        got = s.claim("w", Limits(), 60)
        assert got is not None and got[0].id == first.id
        s.finish_run(got[1].id, RunEnd(status="done", outcome="success"), "done")
        assert s.get(first.id).status == "done"


def test_a_missing_server_skips_here_and_fails_where_required(monkeypatch: pytest.MonkeyPatch) -> None:
    from . import services

    monkeypatch.setattr(services, "REQUIRE_REAL_CLIS", False)
    with pytest.raises(pytest.skip.Exception, match="no Postgres"):
        services.unavailable("no Postgres")
    monkeypatch.setattr(services, "REQUIRE_REAL_CLIS", True)
    with pytest.raises(pytest.fail.Exception, match="no Postgres"):
        services.unavailable("no Postgres")
