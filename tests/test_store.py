"""The store on real SQLite files: migrations, the queue's order and limits, dependencies, sequence
numbers, and what a locked or full database does."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from pydantic import ValidationError
from sqlalchemy import inspect

from orchestrate.store import (
    EventWriter,
    Limits,
    NotFoundError,
    Pace,
    RunEnd,
    Store,
    StoreBusyError,
    StoreError,
    StoreVersionError,
    TaskSpec,
    connect,
    current_revision,
    downgrade,
    head_revision,
    migrate,
)
from orchestrate.store.database import MIGRATIONS
from orchestrate.store.schema import metadata

from .helpers import ROOT


def spec(prompt: str = "p", **kw: object) -> TaskSpec:
    return TaskSpec(prompt=prompt, executor=str(kw.pop("executor", "claude-code")), **kw)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as s:
        yield s  # type: ignore[misc]


def revisions() -> list[str]:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return [r.revision for r in reversed(list(ScriptDirectory.from_config(cfg).walk_revisions()))]


# --- migrations ---------------------------------------------------------------------------------


def test_upgrade_from_empty_matches_the_schema_the_code_uses(tmp_path: Path) -> None:
    engine = connect(f"sqlite:///{tmp_path / 's.db'}")
    assert current_revision(engine) is None
    migrate(engine)
    assert current_revision(engine) == head_revision() == revisions()[-1]
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
        assert diff == [], diff
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    engine.dispose()


def columns(engine: Any) -> set[tuple[str, str]]:
    """Every (table, column) of the database."""
    found = inspect(engine)
    return {(t, c["name"]) for t in found.get_table_names() for c in found.get_columns(t)}


@pytest.mark.parametrize("revision", revisions())
def test_every_migration_goes_down_and_up_again(tmp_path: Path, revision: str) -> None:
    engine = connect(f"sqlite:///{tmp_path / 's.db'}")
    chain = revisions()
    previous = chain[chain.index(revision) - 1] if chain.index(revision) else "base"
    migrate(engine, revision)
    after = columns(engine)
    downgrade(engine, previous)
    assert current_revision(engine) == (None if previous == "base" else previous)
    assert columns(engine) < after  # this step's tables and columns are gone
    migrate(engine, revision)
    assert columns(engine) == after
    migrate(engine)  # and on to the head from there
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_data_survives_a_round_trip_of_the_newest_migration(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as s:
        task = s.submit(spec("keep me", labels=["a"]))
    engine = connect(url)
    downgrade(engine, revisions()[-2])
    migrate(engine)
    engine.dispose()
    with Store.open(url) as s:
        assert s.get(task.id).prompt == "keep me" and s.get(task.id).labels == ["a"]


def test_a_store_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    Store.open(url).close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(StoreVersionError, match="9999"):
        Store.open(url)


def test_the_store_files_are_private(tmp_path: Path) -> None:
    """The store holds what the raw logs hold (0600): its file and SQLite's -wal and -shm too, and an
    older store made 0644 is made private when opened."""
    older = tmp_path / "older.db"
    older.write_bytes(b"")
    older.chmod(0o644)
    for path in (tmp_path / "new.db", older):
        with Store.open(f"sqlite:///{path}") as store:
            store.submit(TaskSpec(prompt="p", executor="claude-code"))
            files = [p for p in tmp_path.iterdir() if p.name.startswith(path.name)]
            assert {p.name for p in files} >= {path.name, f"{path.name}-wal"}
            assert {p.name: p.stat().st_mode & 0o777 for p in files} == {p.name: 0o600 for p in files}


def test_the_default_store_is_under_orchestrate_home(tmp_path: Path) -> None:
    with Store.open() as s:
        s.submit(spec())
    db = tmp_path / "orchestrate-home" / "store.db"
    assert db.exists()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)  # kept in the file


# --- tasks and the queue --------------------------------------------------------------------------


def test_submit_validates_and_stores_everything(store: Store, tmp_path: Path) -> None:
    task = store.submit(
        spec(
            "do it",
            executor_options={"model": "m"},
            run_options={"timeout": 5, "env": {"A": "1"}},
            cwd=tmp_path,
            priority=3,
            labels=["b", "a", "a"],
            metadata={"board": {"column": 2}},
        )
    )
    got = store.get(task.id)
    assert got == task
    assert (got.status, got.labels, got.priority, got.cwd) == ("queued", ["a", "b"], 3, tmp_path)
    assert got.metadata == {"board": {"column": 2}} and got.run_options == {"timeout": 5, "env": {"A": "1"}}
    with pytest.raises(ValidationError, match="unknown run options"):
        spec(run_options={"resume": "x"})
    with pytest.raises(ValidationError):
        spec(run_options={"timeout": -1})
    with pytest.raises(NotFoundError, match="no task 999"):
        store.submit(spec(depends_on=[999]))
    with pytest.raises(NotFoundError):
        store.get(12345)


def test_list_filters(store: Store) -> None:
    a = store.submit(spec(labels=["x"]))
    b = store.submit(spec(executor="codex", labels=["y"]))
    store.cancel(b.id)
    assert [t.id for t in store.list_tasks()] == [a.id, b.id]
    assert [t.id for t in store.list_tasks(label="y")] == [b.id]
    assert [t.id for t in store.list_tasks(executor="claude-code")] == [a.id]
    assert [t.id for t in store.list_tasks(status="cancelled")] == [b.id]
    assert [t.id for t in store.list_tasks(status=["queued", "running"])] == [a.id]
    assert [t.id for t in store.list_tasks(after_id=a.id)] == [b.id]


def claim_all(store: Store) -> list[int]:
    order = []
    while (got := store.claim("w", Limits(), 60)) is not None:
        task, run = got
        order.append(task.id)
        store.finish_run(run.id, RunEnd(status="done", outcome="success"), "done")
    return order


def test_priority_then_age_over_200_tasks(store: Store) -> None:
    ids = {store.submit(spec(priority=(i * 7) % 5)).id: (i * 7) % 5 for i in range(200)}
    order = []
    while (got := store.claim("w", Limits(), 60)) is not None:
        order.append(got[0].id)
    assert order == sorted(ids, key=lambda t: (-ids[t], t))


def test_dependencies_wait_and_a_failure_blocks_everything_downstream(store: Store) -> None:
    a = store.submit(spec("a"))
    b = store.submit(spec("b", depends_on=[a.id], priority=10))
    c = store.submit(spec("c", depends_on=[b.id], priority=10))
    other = store.submit(spec("other"))
    task, run = store.claim("w", Limits(), 60)  # type: ignore[misc]
    assert task.id == a.id  # b and c outrank it but wait for it
    assert store.claim("w", Limits(), 60)[0].id == other.id  # type: ignore[index]
    assert store.claim("w", Limits(), 60) is None
    store.finish_run(run.id, RunEnd(status="failed", outcome="failed", error="boom"), "failed")
    assert (store.get(b.id).status, store.get(b.id).reason) == (
        "blocked",
        f"dependency task {a.id} ended failed",
    )
    assert (store.get(c.id).status, store.get(c.id).reason) == (
        "blocked",
        f"dependency task {b.id} is blocked",
    )
    late = store.submit(spec("late", depends_on=[c.id]))
    assert late.status == "blocked"
    # Retrying the failed task puts its dependents back in the queue.
    store.retry(a.id)
    assert store.get(b.id).status == "queued"
    assert claim_all(store) == [a.id, b.id]  # c and late stay blocked: they named b, not a
    assert store.get(c.id).status == "blocked"


def test_limits_per_executor_label_and_total(store: Store) -> None:
    for _ in range(3):
        store.submit(spec(executor="claude-code", labels=["gpu"]))
        store.submit(spec(executor="codex"))
    limits = Limits(per_executor={"codex": 1}, per_label={"gpu": 2})
    claimed = []
    while (got := store.claim("w", limits, 60)) is not None:
        claimed.append(got[0])
    assert sorted(t.executor for t in claimed) == ["claude-code", "claude-code", "codex"]
    assert store.claim("w", Limits(total=3), 60) is None
    for t in claimed:
        assert store.get(t.id).status == "running" and store.get(t.id).attempts == 1


def test_one_live_run_per_task_whatever_is_asked_of_it(store: Store) -> None:
    task = store.submit(spec(max_attempts=3))
    claimed = store.claim("w1", Limits(), 30)
    assert claimed is not None and claimed[0].id == task.id
    # While it runs: no other worker gets it, a retry is refused, a message waits, a cancel only flags.
    assert store.claim("w2", Limits(), 30) is None
    with pytest.raises(StoreError, match="only a task that ended"):
        store.retry(task.id)
    assert store.send(task.id, "more")[2] is False
    assert store.claim("w2", Limits(), 30) is None
    assert [r.status for r in store.runs(task.id)] == ["running"]
    # Once the run ends done, the waiting message is the next turn: a second run, never two at once.
    store.finish_run(claimed[1].id, RunEnd(status="done", outcome="success"), "done")
    again = store.claim("w2", Limits(), 30)
    assert again is not None and again[1].prompt == "more"
    assert store.claim("w1", Limits(), 30) is None
    assert [r.status for r in store.runs(task.id)] == ["done", "running"]


def test_a_steered_message_the_agent_could_not_take_waits_for_the_next_turn(store: Store) -> None:
    task = store.submit(spec())
    claimed = store.claim("w1", Limits(), 30)
    assert claimed is not None
    run = claimed[1]
    _, first, _ = store.send(task.id, "one")
    _, second, _ = store.send(task.id, "two")
    assert store.waiting_messages([task.id, 999]) == {task.id}
    assert store.steer(run.id) == [(first, "one"), (second, "two")]
    assert store.waiting_messages([task.id]) == set() and store.steer(run.id) == []  # taken once
    assert [m["delivery"] for m in store.messages(task.id)] == ["steered", "steered"]
    store.unsteer(run.id, [second], "the agent's input is closed")  # "one" went in, "two" did not
    assert [(m["delivered_run_id"], m["delivery"]) for m in store.messages(task.id)] == [
        (run.id, "steered"),
        (None, None),
    ]
    notices = [e.data for e in store.events(task_id=task.id) if e.kind == "notice"]
    assert [(n["delivery"], n["messages"]) for n in notices] == [
        ("steered", [first, second]),
        ("next_turn", [second]),
    ]
    store.finish_run(run.id, RunEnd(status="done", outcome="success"), "done")
    assert store.steer(run.id) == []  # an ended run takes nothing
    nxt = store.claim("w1", Limits(), 30)
    assert nxt is not None and nxt[1].prompt == "two"
    assert [m["delivery"] for m in store.messages(task.id)] == ["steered", "next_turn"]


def test_cancel_queued_at_once_and_running_by_request(store: Store) -> None:
    a, b = store.submit(spec()), store.submit(spec())
    running, _ = store.claim("w", Limits(), 60)  # type: ignore[misc]
    assert running.id == a.id
    assert store.cancel(b.id).status == "cancelled"
    flagged = store.cancel(a.id)
    assert flagged.status == "running" and flagged.cancel_requested
    assert store.cancel_requested([a.id, b.id]) == {a.id}


def test_an_expired_lease_is_lost_then_retried_with_its_session(store: Store) -> None:
    task = store.submit(spec(max_attempts=2))
    _, run = store.claim("dead", Limits(), 0.2)  # type: ignore[misc]
    assert store.expired_runs() == []
    assert store.heartbeat("dead", [run.id], 0.2) == {run.id}
    time.sleep(0.3)
    [expired] = store.expired_runs()
    assert expired.id == run.id
    store.set_process(run.id, 1, None)
    after = store.mark_lost(run.id, by="new")
    assert after is not None and after.status == "queued" and "lost" in (after.reason or "")
    assert store.mark_lost(run.id, by="other") is None  # only one worker recovers it
    assert store.heartbeat("dead", [run.id], 60) == set()  # the old worker learns it lost the run
    _, second = store.claim("new", Limits(), 60)  # type: ignore[misc]
    assert (second.attempt, second.parent_run_id) == (2, run.id)
    store.finish_run(second.id, RunEnd(status="lost"), "lost")
    assert store.get(task.id).status == "lost"


# --- events ---------------------------------------------------------------------------------------


def test_event_numbers_never_repeat_across_connections_and_threads(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as s:
        task = s.submit(spec())
        _, run = s.claim("w", Limits(), 60)  # type: ignore[misc]

    def write(n: int) -> None:
        with Store.open(url) as mine:
            for i in range(20):
                mine.append([(task.id, run.id, "notice", f'{{"w": {n}, "i": {i}}}', 0.0)] * 3)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    with Store.open(url) as s:
        evs = s.events(task_id=task.id, limit=10_000)
        run_evs = s.events(run_id=run.id, limit=10_000)
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))  # contiguous, in order
    assert [e.run_seq for e in run_evs] == list(range(1, 241))
    for n in range(4):  # each writer's events in its own order
        mine = [e.data["i"] for e in run_evs if e.data["w"] == n]
        assert mine == sorted(mine) and len(mine) == 60


def test_events_after_an_offset_are_exactly_the_rest(store: Store) -> None:
    task = store.submit(spec())
    store.append([(task.id, None, "notice", f'{{"n": {i}}}', 0.0) for i in range(50)])
    everything = store.events(task_id=task.id)
    for after in (0, 1, 17, len(everything) - 1, len(everything), len(everything) + 5):
        got = store.events(task_id=task.id, after=after)
        assert got == [e for e in everything if e.seq > after]
    page = store.events(task_id=task.id, after=3, limit=5)
    assert [e.seq for e in page] == [4, 5, 6, 7, 8]
    with pytest.raises(ValueError):
        store.events()


# --- a locked or full database --------------------------------------------------------------------


@contextlib.contextmanager
def locked(db: Path) -> Iterator[None]:
    """Another connection holding the database's write lock (BEGIN EXCLUSIVE) while the block runs."""
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_locked_database_is_a_clear_busy_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    Store.open(url).close()
    with locked(tmp_path / "s.db"), Store.open(url, busy_timeout=0.1) as s:
        started = time.monotonic()
        with pytest.raises(StoreBusyError, match="submitting a task: database is locked"):
            s.submit(spec())
        assert time.monotonic() - started < 3


def test_the_writer_batches_events_on_its_own_thread_and_put_never_waits(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = store.submit(spec())
    calls: list[tuple[str, int]] = []
    append, release = store.append, threading.Event()

    def slow(batch: Any) -> Any:  # a store that hangs until released: events gather meanwhile
        calls.append((threading.current_thread().name, len(batch)))
        release.wait(10)
        return append(batch)

    monkeypatch.setattr(store, "append", slow)
    writer = EventWriter(store).start()
    for i in range(2000):
        writer.put(task.id, None, "notice", f'{{"n": {i}}}')  # returns while the store hangs
    assert not writer.flush(0.05)
    release.set()
    assert writer.close(10)
    assert sum(n for _, n in calls) == 2000 and len(calls) <= 3  # many events per transaction
    assert {name for name, _ in calls} == {"orchestrate-store-writer"}  # never the caller's thread
    notices = [e.data["n"] for e in store.events(task_id=task.id, limit=5000) if e.kind == "notice"]
    assert notices == list(range(2000))


def test_the_writer_holds_events_while_locked_and_loses_none(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url, busy_timeout=0.05) as s:
        task = s.submit(spec())
        writer = EventWriter(s, interval=0.01).start()
        with locked(tmp_path / "s.db"):
            for i in range(300):
                writer.put(task.id, None, "notice", f'{{"n": {i}}}')
            assert not writer.flush(0.5)  # nothing can be written yet
            assert isinstance(writer.trouble[task.id].error, StoreBusyError)
        assert writer.flush(10)
        assert writer.close()
        trouble = writer.trouble[task.id]
        assert trouble.last_ok is not None and trouble.dropped == 0
        assert "database is locked" in trouble.describe() and "resumed" in trouble.describe()
        assert [e.data["n"] for e in s.events(task_id=task.id) if e.kind == "notice"] == list(range(300))


def test_the_writer_bounds_what_it_holds(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url, busy_timeout=0.05) as s:
        task = s.submit(spec())
        writer = EventWriter(s, max_pending=10).start()
        with locked(tmp_path / "s.db"):
            for i in range(25):
                writer.put(task.id, None, "notice", f'{{"n": {i}}}')
        assert writer.close(10)
        assert writer.trouble[task.id].dropped == 15
        assert len([e for e in s.events(task_id=task.id) if e.kind == "notice"]) == 10


def test_the_writer_bounds_the_bytes_it_holds(tmp_path: Path) -> None:
    # A raw record is a chunk read from the agent, up to a MiB: a count of events bounds nothing.
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url, busy_timeout=0.05) as s:
        task = s.submit(spec())
        writer = EventWriter(s, max_pending_bytes=4500).start()
        with locked(tmp_path / "s.db"):
            for i in range(10):
                writer.put(task.id, None, "notice", f'{{"n": {i}, "pad": "{"x" * 1000}"}}')
            assert writer.pending_bytes <= 4500
        assert writer.close(10)
        assert writer.trouble[task.id].dropped == 6 and writer.pending_bytes == 0
        assert [e.data["n"] for e in s.events(task_id=task.id) if e.kind == "notice"] == [0, 1, 2, 3]


def test_a_paced_producer_waits_for_the_store_and_not_for_a_locked_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url, busy_timeout=0.05) as s:
        task = s.submit(spec())
        writer = EventWriter(s, interval=10.0).start()  # (it writes when woken: by the pace's wait)
        pace = Pace(writer, high=10_000, timeout=0.3)
        pad = "x" * 1000
        for i in range(30):
            writer.put(task.id, None, "notice", f'{{"n": {i}, "pad": "{pad}"}}')
        assert pace.due
        pace.wait()
        assert pace.on and writer.pending_bytes <= 5_000 and not pace.due
        with locked(tmp_path / "s.db"):
            for i in range(30, 60):
                writer.put(task.id, None, "notice", f'{{"n": {i}, "pad": "{pad}"}}')
            pace.wait()  # the store cannot take them: it waits its timeout, then no more
            assert not pace.on and not pace.due and writer.pending_bytes > 10_000
        assert writer.close(10)
        assert [e.data["n"] for e in s.events(task_id=task.id) if e.kind == "notice"] == list(range(60))


FULL = textwrap.dedent(
    """
    import resource, sys
    from orchestrate.store import EventWriter, Store, StoreError, TaskSpec
    store = Store.open(sys.argv[1])
    task = store.submit(TaskSpec(prompt="p", executor="claude-code"))
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))  # Python ignores SIGXFSZ: EFBIG
    writer = EventWriter(store).start()
    for i in range(2000):
        writer.put(task.id, None, "notice", '{"pad": "%s"}' % ("x" * 500))
    writer.close(0.5)
    trouble = writer.trouble[task.id]
    print(type(trouble.error).__name__, trouble.dropped > 0, trouble.last_ok is None)
    try:
        store.cancel(task.id)
    except StoreError as exc:
        print("cancel:", type(exc).__name__, exc)
    print("read:", store.get(task.id).status)
    """
)


def test_a_full_disk_is_a_full_error_and_reads_go_on(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", FULL, f"sqlite:///{tmp_path / 's.db'}"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "StoreFullError True True"
    # A small write may still fit once the failed ones are rolled back; either way the store agrees.
    if lines[1].startswith("cancel: StoreFullError"):
        assert lines[1].startswith("cancel: StoreFullError cancelling task 1:")
        assert lines[2] == "read: queued"
    else:
        assert lines[1:] == ["read: cancelled"]


def test_store_errors_are_orchestrate_errors() -> None:
    from orchestrate import OrchestrateError

    assert issubclass(StoreError, OrchestrateError)


def test_the_fast_schema_check_knows_alembics_head(tmp_path: Path) -> None:
    """Store.open tells a current store by one query against database.HEAD, without importing
    Alembic; HEAD must be the newest migration, or a store would be taken as current too early."""
    from orchestrate.store import database

    assert head_revision() == database.HEAD
    engine = database.connect(f"sqlite:///{tmp_path / 'fast.db'}")
    try:
        assert not database.is_current(engine)  # empty
        database.migrate(engine)
        assert database.is_current(engine)
    finally:
        engine.dispose()
