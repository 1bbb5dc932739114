"""What the store and the engine cost, each as a ratio to a baseline measured in the same run.

1. Events stored per second by the engine's batching writer (``EventWriter``: one transaction per
   batch, sequence numbers allocated per task and per run) against a bare ``sqlite3`` loop inserting
   the same rows into a table of the same shape, batched the same way, in WAL mode.
2. Scheduling overhead per task: N tasks of the fake Claude agent queued and run by one in-process
   worker (claim, lease, events, finish) against the same N runs of the same agent driven directly
   through ``orchestrate.Run`` at the same concurrency.  The difference, per task, is what the engine
   adds; the ratio is engine time over bare time.
3. Memory as tasks finish: the process's resident size after each quarter of the tasks, which
   should stay flat (the engine keeps nothing of a finished task in memory).

    .venv/bin/python bench/engine_overhead.py [--tasks 1000] [--events 100000] [--capacity 8]
    .venv/bin/python bench/engine_overhead.py --tiny      # seconds; what the smoke test runs
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import orjson

from orchestrate import Run, Task
from orchestrate.engine import Engine
from orchestrate.executors.base import ExecutorOptions
from orchestrate.registry import default_registry
from orchestrate.store import EventWriter, Limits, Store, TaskSpec

ROOT = Path(__file__).resolve().parent.parent
FAKE = [sys.executable, str(ROOT / "fixtures" / "bin" / "fake_claude.py")]
PAYLOAD = orjson.dumps(
    {"op": "add", "index": 0, "entry": {"content": "x" * 200, "type": {"kind": "thinking"}}}
)


def rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


# --- 1. events per second ---------------------------------------------------------------------


def bare_inserts(path: Path, n: int, runs: int, batch: int) -> float:
    """Seconds to insert ``n`` event rows with plain sqlite3 (the floor)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(
        "CREATE TABLE events (task_id INTEGER, seq INTEGER, run_id INTEGER, run_seq INTEGER, ts REAL,"
        " kind TEXT, data TEXT, PRIMARY KEY (task_id, seq))"
    )
    db.execute("CREATE UNIQUE INDEX ix_run ON events (run_id, run_seq)")
    data = PAYLOAD.decode()
    started = time.perf_counter()
    for first in range(0, n, batch):
        rows = [
            (i % runs + 1, i + 1, i % runs + 1, i + 1, time.time(), "patch", data)
            for i in range(first, min(n, first + batch))
        ]
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        db.execute("COMMIT")
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


def writer_inserts(url: str, n: int, runs: int, batch: int) -> float:
    """Seconds for the engine's writer to store ``n`` events spread over ``runs`` runs."""
    with Store.open(url) as store:
        ids = []
        for _ in range(runs):
            store.submit(TaskSpec(prompt="bench", executor="claude-code", cwd=Path.cwd()))
            claimed = store.claim("bench", Limits(), 3600)
            assert claimed is not None
            ids.append((claimed[0].id, claimed[1].id))
        writer = EventWriter(store, batch=batch).start()
        started = time.perf_counter()
        for i in range(n):
            task_id, run_id = ids[i % runs]
            writer.put(task_id, run_id, "patch", PAYLOAD)
        assert writer.flush(600)
        elapsed = time.perf_counter() - started
        writer.close()
        assert writer.written == n
    return elapsed


# --- 2. scheduling overhead ---------------------------------------------------------------------


async def bare_runs(n: int, capacity: int, cwd: Path) -> float:
    """Seconds to run the fake agent ``n`` times through Run, ``capacity`` at a time, no engine."""
    executor = default_registry.create("claude-code", ExecutorOptions(base_command=FAKE))
    limiter = anyio.CapacityLimiter(capacity)

    async def one(i: int) -> None:
        async with limiter:
            run = Run(executor, Task(prompt="plain", cwd=cwd, raw_log=cwd / f"bare-{i}.jsonl"))
            async with run:
                async for _ in run.patches():
                    pass
                result = await run.wait()
            assert result.outcome == "success", result.error

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return time.perf_counter() - started


async def engine_runs(url: str, n: int, capacity: int, cwd: Path) -> tuple[float, list[float]]:
    """Seconds for one in-process worker to run ``n`` queued tasks; resident MB at each quarter."""
    memory: list[float] = []
    async with Engine.open(url, capacity=capacity, poll=0.02, lease=60) as engine:
        for _ in range(n):
            await engine.submit("plain", "claude-code", executor_options={"base_command": FAKE}, cwd=cwd)
        marks = sorted({max(1, n * q // 4) for q in (1, 2, 3, 4)})
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.work)
            # Counted by a bare query: listing the finished tasks would itself grow with them.
            counter = sqlite3.connect(url.removeprefix("sqlite:///"))
            while marks:
                query = "SELECT count(*) FROM tasks WHERE status IN ('done', 'failed')"
                done = counter.execute(query).fetchone()[0]
                while marks and done >= marks[0]:
                    marks.pop(0)
                    memory.append(rss_mb())
                await anyio.sleep(0.05)
            elapsed = time.perf_counter() - started
            counter.close()
            engine.stop()
        failed = await engine.list(status="failed", limit=n)
        assert not failed, failed[0].error
    return elapsed, memory


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--capacity", type=int, default=8)
    parser.add_argument("--tiny", action="store_true", help="a few tasks and events (the smoke test)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.tiny:
        args.tasks, args.events, args.capacity = 4, 2000, 2
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.environ["ORCHESTRATE_HOME"] = str(folder / "home")
        bare_s = bare_inserts(folder / "bare.db", args.events, 10, 1000)
        writer_s = writer_inserts(f"sqlite:///{folder / 'writer.db'}", args.events, 10, 1000)
        anyio.run(bare_runs, args.capacity, args.capacity, folder)  # warm up: imports, first spawns
        bare_run_s = anyio.run(bare_runs, args.tasks, args.capacity, folder)
        engine_s, memory = anyio.run(
            engine_runs, f"sqlite:///{folder / 'engine.db'}", args.tasks, args.capacity, folder
        )
    report = {
        "events": args.events,
        "bare_events_per_s": round(args.events / bare_s),
        "store_events_per_s": round(args.events / writer_s),
        "store_vs_bare": round(bare_s / writer_s, 3),
        "tasks": args.tasks,
        "capacity": args.capacity,
        "bare_runs_s": round(bare_run_s, 3),
        "engine_runs_s": round(engine_s, 3),
        "engine_vs_bare": round(engine_s / bare_run_s, 3),
        "overhead_ms_per_task": round((engine_s - bare_run_s) / args.tasks * 1000, 2),
        "rss_mb_at_quarters": [round(m, 1) for m in memory],
    }
    if args.json:
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        print(
            f"events: store {report['store_events_per_s']}/s, bare sqlite3 {report['bare_events_per_s']}/s "
            f"(store/bare {report['store_vs_bare']})"
        )
        print(
            f"{args.tasks} tasks at {args.capacity} at once: engine {report['engine_runs_s']} s, bare runs "
            f"{report['bare_runs_s']} s (engine/bare {report['engine_vs_bare']}; "
            f"{report['overhead_ms_per_task']} ms per task)"
        )
        print(f"resident MB as tasks finish (each quarter): {report['rss_mb_at_quarters']}")
    return report


if __name__ == "__main__":
    main()
