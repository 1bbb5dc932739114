"""The store-wide change sequence (store/clock.py) the board's stream resumes by: several processes
change tasks at once, on SQLite and on Postgres, while a reader pages through the changes by number as
a board reconnecting after every page would; it must see every change once, none twice, none late
behind a larger number.  And the migration that brings it numbers an existing store's tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from orchestrate.serve.streams import changed_tasks, newest_task_key, parse_board_id
from orchestrate.store import Store, TaskSpec, connect, downgrade, migrate

from .helpers import ROOT

WRITER = textwrap.dedent(
    """
    import json, sys
    from orchestrate.store import Store
    url, pairs = sys.argv[1], json.loads(sys.argv[2])
    store = Store.open(url)
    store.get(pairs[0][0])  # connected
    print("ready", flush=True)
    sys.stdin.readline()
    for parent, child in pairs:
        # One transaction changes two tasks: the parent is cancelled, its queued dependent blocked.
        assert store.cancel(parent).status == "cancelled"
    store.close()
    print("done", flush=True)
    """
)


PROBE = textwrap.dedent(
    """
    import json, sys
    from sqlalchemy import text
    from orchestrate.store import Store
    url, after = sys.argv[1], int(sys.argv[2])
    store = Store.open(url)
    query = text("SELECT change_seq FROM tasks WHERE change_seq > :a ORDER BY change_seq")
    seen, late, polls = set(), [], 0
    print("ready", flush=True)
    with store.engine.connect() as conn:
        # Read as the store's readers do (store.py's _read): on SQLite a deferred transaction, not the
        # write lock every other transaction takes up front (polled as fast as it can, that lock
        # starved the writers past their busy timeout on a loaded machine: "database is locked").
        if conn.dialect.name == "sqlite":
            conn = conn.execution_options(readonly=True)
        else:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        while True:
            # As fast as it can: a number that becomes visible after a larger one is caught here.
            numbers = [int(n) for n in conn.execute(query, {"a": after}).scalars()]
            if conn.dialect.name == "sqlite":
                conn.rollback()
            polls += 1
            top = max(seen, default=after)
            late += [n for n in numbers if n not in seen and n < top]
            seen.update(numbers)
            if numbers and numbers[-1] == int(sys.argv[3]):
                break
    print(json.dumps({"late": late, "polls": polls}), flush=True)
    """
)


def spec(tmp: Path, **kw: object) -> TaskSpec:
    return TaskSpec(prompt="p", executor="x", cwd=tmp, **kw)  # type: ignore[arg-type]


def test_concurrent_writers_are_read_in_order_every_change_once(url: str, tmp_path: Path) -> None:
    writers, per_writer = 3, 20
    with Store.open(url) as store:
        pairs = []
        for _ in range(writers * per_writer):
            parent = store.submit(spec(tmp_path)).id
            pairs.append((parent, store.submit(spec(tmp_path, depends_on=[parent])).id))
        start = newest_task_key(store)
        assert start == 2 * len(pairs)  # each submit was one change
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, url, json.dumps(pairs[n::writers])],
                cwd=ROOT,
                env=os.environ | {"PYTHONPATH": str(ROOT)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for n in range(writers)
        ]
        probe = subprocess.Popen(
            [sys.executable, "-c", PROBE, url, str(start), str(start + 2 * len(pairs))],
            cwd=ROOT,
            env=os.environ | {"PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for proc in [*procs, probe]:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n", proc.communicate()
        seen: list[tuple[int, int, str]] = []
        stop = threading.Event()

        def board() -> None:
            # A board that reconnects after every short page: it resumes after the last id it got.
            after = start
            while True:
                finished = stop.is_set()  # read once more after the writers are done
                page = changed_tasks(store, after, 7)
                for number, task in page:
                    seen.append((number, task.id, task.status))
                    after = number
                if finished and not page:
                    return
                if not page:
                    time.sleep(0.002)

        reader = threading.Thread(target=board)
        reader.start()
        for proc in procs:  # go: all at once
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0 and out.endswith(b"done\n"), err.decode()[-3000:]
        stop.set()
        reader.join(30)
        assert not reader.is_alive()
        assert probe.stdout is not None
        probed = json.loads(probe.stdout.readline() or "null")
        _, err = probe.communicate(timeout=30)
        assert probe.returncode == 0 and probed is not None, err.decode()[-2000:]
        # Numbers became visible in order: none appeared after a larger one had.
        assert probed["late"] == [] and probed["polls"] > 10, probed
        numbers = [n for n, _, _ in seen]
        assert numbers == sorted(set(numbers))  # rising: nothing twice
        # Every task changed exactly once after ``start`` (parent cancelled, child blocked), so a
        # change read late or skipped would show as a task missing or seen twice here.
        assert sorted(t for _, t, _ in seen) == sorted(t for pair in pairs for t in pair)
        status = {t: s for _, t, s in seen}
        assert {status[p] for p, _ in pairs} == {"cancelled"} and {status[c] for _, c in pairs} == {"blocked"}
        assert numbers[-1] == newest_task_key(store) == start + 2 * len(pairs)  # no number lost
        # The same read again, from the start, the way a new board sees the store: one item per task.
        everything = changed_tasks(store, 0, 10_000)
        assert len(everything) == 2 * len(pairs) and [n for n, _ in everything][-len(seen) :] == numbers


def test_a_write_that_fails_takes_no_number(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        task = store.submit(spec(tmp_path))
        before = store.last_change()
        with pytest.raises(Exception, match="only a running turn"):
            store.interrupt(task.id)  # refused inside its transaction: rolled back, unnumbered
        assert store.last_change() == before
        store.cancel(task.id)
        assert [n for n, _ in store.changes(before)] == [before + 1]


def test_the_migration_numbers_existing_tasks_in_the_boards_old_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        ids = [store.submit(spec(tmp_path)).id for _ in range(5)]
    engine = connect(url)
    downgrade(engine, "0004")
    with engine.begin() as conn:  # the old board order: updated_at, then id; make it differ from ids
        for task_id, stamp in zip(ids, [5.0, 1.0, 3.0, 3.0, 2.0], strict=True):
            conn.execute(text("UPDATE tasks SET updated_at = :s WHERE id = :i"), {"s": stamp, "i": task_id})
    migrate(engine)
    engine.dispose()
    with Store.open(url) as store:
        order = [task.id for _, task in store.changes(0)]
        assert order == [ids[1], ids[4], ids[2], ids[3], ids[0]]
        assert [n for n, _ in store.changes(0)] == [1, 2, 3, 4, 5] and store.last_change() == 5
        store.cancel(ids[0])  # and the counter goes on from there
        assert store.changes(5)[0][0] == 6


def test_board_ids() -> None:
    assert parse_board_id("42") == 42
    assert parse_board_id("1732400000.5:3") == 0  # an id from before change numbers: from the start
    for bad in ("", "x", "-1", "1:", ":1", "٣", "1e3"):
        assert parse_board_id(bad) is None, bad
