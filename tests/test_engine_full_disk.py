"""A real full disk under a running engine: the store on a tmpfs of a few megabytes (mounted in a
mount namespace of its own, `unshare`, so nothing outside the test sees it) is filled to ENOSPC while
an agent runs.  The run is not lost, its events wait and are all stored once space is back, the
task says what happened, and the engine goes on to the next task."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest

from .helpers import FAKE_CLAUDE, ROOT

SCRIPT = textwrap.dedent(
    """
    import json, os, subprocess, sys, anyio
    from pathlib import Path
    from orchestrate import ApprovalDecision
    from orchestrate.engine import Engine
    from orchestrate.process.pipes import ShutdownPolicy
    from orchestrate.store import EventWriter

    disk, logs, fake, hold = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], check=True)
    filler = disk / "filler"
    asked, go = anyio.Event(), anyio.Event()

    class Gate:  # approves once the test has filled the disk: the rest of the run meets a full store
        async def request_approval(self, request):
            asked.set()
            await go.wait()
            return ApprovalDecision.approve()

    def fill():
        with filler.open("wb") as f:
            try:
                while True:
                    f.write(b"x" * 65536)
                    f.flush()
            except OSError as exc:
                return exc.strerror

    async def main():
        url = f"sqlite:///{disk / 'store.db'}"
        out = {}
        options = dict(lease=5.0, poll=0.05, busy_timeout=0.2, log_dir=logs, approvals=Gate(),
                       shutdown=ShutdownPolicy(interrupt_grace=0.5, term_grace=0.5))
        engine = Engine.open(url, **options)
        engine.writer = EventWriter(engine.store, max_pending=hold)  # what it may hold while the store fails
        async with engine, anyio.create_task_group() as tg:
            tg.start_soon(engine.work)
            spec = dict(executor_options={"base_command": [sys.executable, fake]}, cwd=str(logs))
            task = await engine.submit("tool", "claude-code", **spec)
            with anyio.fail_after(20):
                await asked.wait()
                out["fill"] = await anyio.to_thread.run_sync(fill)
                go.set()
                await anyio.sleep(1.5)  # the agent ends meanwhile; its events and its end wait
                out["while_full"] = (await engine.get(task.id)).status
                filler.unlink()  # space again
                engine.writer.max_pending = 200_000  # (a bound that small only while the disk is full)
                done = await engine.wait(task.id)
                nxt = await engine.wait((await engine.submit("plain", "claude-code", **spec)).id)
            engine.stop()
            [run] = await engine.runs(task.id)
            events = [e async for e in engine.subscribe(task.id, follow=False)]
        out |= {
            "status": done.status, "notice": done.notice, "error_code": done.error_code, "error": done.error,
            "rebuilt": len(await engine.rebuild(run.id)),
            "next": nxt.status, "errors": [type(e).__name__ for e in engine.errors],
            "seqs": [e.seq for e in events],
            "raw": len([e for e in events if e.kind == "raw"]),
            "log_lines": len(Path(run.raw_log).read_bytes().splitlines()),
            "tool_done": any("ran: echo original" in json.dumps(e.data) for e in events if e.kind == "patch"),
        }
        print(json.dumps(out))

    anyio.run(main)
    """
)


def full_disk(tmp_path: Path, hold: int) -> dict[str, Any]:
    """The script's findings, with the engine's writer holding at most ``hold`` events."""
    disk, logs = tmp_path / "disk", tmp_path / "logs"
    disk.mkdir()
    logs.mkdir()
    unshare = shutil.which("unshare")
    argv = [sys.executable, "-c", SCRIPT, str(disk), str(logs), str(FAKE_CLAUDE), str(hold)]
    probe = unshare and subprocess.run(
        [unshare, "-rm", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True
    )
    if not probe or probe.returncode != 0:
        # A kernel facility, not something .ci/install can install: skipped, as test_rawlog's tmpfs.
        pytest.skip(f"no unshare, or no mount namespaces here: {probe and probe.stderr!r}")
    assert unshare
    proc = subprocess.run(
        [unshare, "-rm", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = orjson.loads(proc.stdout.splitlines()[-1])
    return out


def test_a_full_disk_delays_a_runs_events_loses_none_and_the_task_says_so(tmp_path: Path) -> None:
    out = full_disk(tmp_path, hold=200_000)
    assert out["fill"] == "No space left on device"
    assert out["while_full"] in ("running", "waiting_approval")  # neither lost nor failed
    assert out["status"] == "done" and out["error_code"] is None, out
    assert "database or disk is full" in out["notice"] and "resumed" in out["notice"], out
    assert out["next"] == "done"  # the engine went on
    assert out["seqs"] == list(range(1, len(out["seqs"]) + 1))  # nothing lost, nothing twice
    assert out["raw"] == out["log_lines"] and out["tool_done"]


def test_events_beyond_what_the_writer_may_hold_fail_the_task_with_the_stores_code(tmp_path: Path) -> None:
    out = full_disk(tmp_path, hold=2)
    assert out["fill"] == "No space left on device" and out["while_full"] in ("running", "waiting_approval")
    # A clear error on the task, not a lost run: its end is stored, and the raw log still rebuilds it.
    assert (out["status"], out["error_code"]) == ("failed", "store_full"), out
    assert "could not be kept (the raw log has them)" in out["error"], out
    assert out["raw"] < out["log_lines"] and out["rebuilt"] > 0
    assert out["next"] == "done"
    assert out["seqs"] == list(range(1, len(out["seqs"]) + 1))
