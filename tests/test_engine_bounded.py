"""An engine run keeps memory flat in the number of entries (issue 16), and every entry still reaches
the store and a live watcher of the task.

The agent is fixtures/bin/fake_flood.py (big entries, as fast as the pipe takes them), run by an
engine embedded in a process of its own on a real SQLite file, so the peak RSS measured is that
run's alone: 1,000 entries, then 10,000.  A live subscriber of the task in the same process counts
the entries it is shown as they are stored; the store is read afterwards, here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrate.engine.rebuild import rebuild_entries
from orchestrate.store import Store

from .helpers import FIXTURES, ROOT

FAKE_FLOOD = FIXTURES / "bin" / "fake_flood.py"

_ENGINE_RUN = r"""
import json, sys, pathlib
import anyio
from orchestrate.engine import Engine

def peak_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1])

async def main(home, agent, prompt):
    home = pathlib.Path(home)
    shown = set()  # the entries (indexes) a live watcher of the task is shown

    async def watch(engine, task_id):
        async for event in engine.subscribe(task_id):
            if event.kind == "patch":
                shown.add(event.data["index"])

    async with Engine.open(f"sqlite:///{home / 'store.db'}", poll=0.05) as engine:
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.work)
            options = {"base_command": agent.split()}
            task = await engine.submit(prompt, "claude-code", executor_options=options, cwd=home)
            tg.start_soon(watch, engine, task.id)
            with anyio.fail_after(60):
                await engine.wait(task.id)
            engine.stop()
    print(json.dumps({"peak_kb": peak_kb(), "task": task.id, "shown": len(shown)}))

anyio.run(main, *sys.argv[1:])
"""


def engine_run(home: Path, n: int) -> dict[str, Any]:
    """One task of ``n`` big entries (and a tool call open all through) run by an engine."""
    home.mkdir()
    prompt = f"tool unknown={n} pad=2000 close result"
    agent = f"{sys.executable} {FAKE_FLOOD}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCHESTRATE_HOME": str(home)}
    env.pop("MALLOC_MMAP_THRESHOLD_", None)  # (the engine's own setting is what is measured)
    out = subprocess.run(
        [sys.executable, "-c", _ENGINE_RUN, str(home), agent, prompt],
        env=env,
        capture_output=True,
        timeout=90,
        check=True,
    )
    got: dict[str, Any] = json.loads(out.stdout.decode().splitlines()[-1])
    return got


def test_an_engine_runs_memory_is_flat_in_the_entries_and_every_entry_is_stored(tmp_path: Path) -> None:
    small = engine_run(tmp_path / "small", 1000)
    big = engine_run(tmp_path / "big", 10000)
    with Store.open(f"sqlite:///{tmp_path / 'big' / 'store.db'}") as store:
        task = store.get(big["task"])
        assert (task.status, task.input_tokens) == ("done", 10)  # the result's figures, stored
        [run] = store.runs(task.id)
        stored: dict[int, dict[str, Any]] = {}  # each entry as its last stored patch leaves it
        after = 0
        while page := store.events(run_id=run.id, after=after):
            after = page[-1].run_seq or after
            stored |= {e.data["index"]: e.data["entry"] for e in page if e.kind == "patch"}
        entries = rebuild_entries(store, run.id)  # the raw log's, replayed: every entry there is
    assert len(entries) > 10000
    assert sorted(stored) == [e.index for e in entries]
    assert big["shown"] == len(entries)  # the live watcher was shown every one
    # The tool call, opened first and closed last, is stored closed.
    tool = next(e for e in entries if e.type.kind == "tool_use")
    assert stored[tool.index]["type"]["tool"]["status"] == "success"
    # Ten times the entries, about the same memory: what grows is the bounded queues filling (the
    # writer's 4 MiB, 2 windows of unread patches, the chunks read ahead), not entries kept.
    # Measured (MB, 1,000 -> 10,000; bench/README.md round 24): 101 -> 188 keeping every entry (main
    # before), 99-102 -> 190-192 streaming alone, 102 -> 164-168 paced too (glibc's heap growing in
    # holes: engine/heap.py), 89-92 -> 107-112 now (and 112-118 for 30,000).
    assert big["peak_kb"] - small["peak_kb"] < 32 * 1024, (small, big)


_HEAP = "from orchestrate.engine.heap import steady_heap; print(steady_heap(), steady_heap())"


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):
        return False


@pytest.mark.skipif(not _glibc(), reason="not glibc: nothing is set")
def test_the_heap_settings_are_made_once_and_leave_glibcs_own_variables_alone() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env["PYTHONPATH"] = str(ROOT)

    def settings(**more: str) -> str:
        done = subprocess.run([sys.executable, "-c", _HEAP], env=env | more, capture_output=True, timeout=30)
        return done.stdout.decode().strip()

    assert settings() == "2 2"
    assert settings(MALLOC_ARENA_MAX="4") == "1 1"
    assert settings(MALLOC_ARENA_MAX="4", MALLOC_MMAP_THRESHOLD_="65536") == "0 0"
