"""A cancel or interrupt asked from another process reaches the embedded worker's agent within about a
second, not at its next heartbeat (lease/3: 10 s with this 30 s lease), on SQLite (one indexed query a
second for all the worker's live runs) and on Postgres (the request's NOTIFY wakes the worker)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from orchestrate.engine import Engine

from .helpers import FAKE_CLAUDE, ROOT, group_members

pytestmark = pytest.mark.anyio

# A turn that streams a word every 0.1 s for a minute: only the request can end it in time.
FAKE = {"base_command": [sys.executable, str(FAKE_CLAUDE)], "env": {"FAKE_SLOW_WORDS": "600"}}
LEASE = 30.0  # heartbeats every 10 s: a request that waited for one would take far over the bound
BOUND = 3.0


def cli(url: str, *args: str) -> float:
    """Run ``orchestrate ARGS`` in another process; the time its request was committed by."""
    done = subprocess.run(
        [sys.executable, "-m", "orchestrate", *args, "--store", url],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    return time.monotonic()


@pytest.mark.parametrize("how", ["interrupt", "cancel"])
async def test_a_request_from_another_process_takes_effect_within_a_second_or_so(
    url: str, how: str, tmp_path: Path
) -> None:
    async with Engine.open(url, lease=LEASE, poll=0.05) as engine, anyio.create_task_group() as tg:
        if url.startswith("postgresql"):
            engine.stop_check = 60.0  # no poll in time: only the request's NOTIFY can wake the worker
        tg.start_soon(engine.work)
        task = await engine.submit("slow", "claude-code", executor_options=FAKE, cwd=tmp_path)
        with anyio.fail_after(20):
            async for event in engine.subscribe(task.id):
                if "w2" in str(event.data):
                    break
        asked = await anyio.to_thread.run_sync(cli, url, how, str(task.id))
        with anyio.fail_after(20):
            for _ in iter(int, 1):  # until the run has ended (polled: the store is the truth)
                if (await engine.runs(task.id))[0].status != "running":
                    break
                await anyio.sleep(0.02)
        took = time.monotonic() - asked
        engine.stop()
    [run] = await engine.runs(task.id)
    assert run.status == ("interrupted" if how == "interrupt" else "cancelled"), run
    assert took < BOUND, f"the {how} took {took:.1f} s to reach the worker"
    assert run.pid and group_members(run.pid) == []
    now = await engine.get(task.id)
    assert now.status == ("done" if how == "interrupt" else "cancelled")


def test_one_query_tells_cancel_and_interrupt_requests_apart(url: str, tmp_path: Path) -> None:
    from orchestrate.store import Limits, Store, TaskSpec

    with Store.open(url) as store:
        ids = []
        for _ in range(4):
            ids.append(store.submit(TaskSpec(prompt="p", executor="x", cwd=tmp_path)).id)
            assert store.claim("w", Limits(), 60) is not None
        store.interrupt(ids[0])
        store.cancel(ids[1])
        store.interrupt(ids[2])
        store.cancel(ids[2])  # a cancel outranks the interrupt asked before it
        assert store.stop_requests(ids) == ({ids[1], ids[2]}, {ids[0]})
        assert store.stop_requests(ids[3:]) == (set(), set())
        assert store.stop_requests([]) == (set(), set())
