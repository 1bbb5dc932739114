"""The engine end to end: real fake-agent processes, a real SQLite store, workers in this process and
in others."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrate import ApprovalDecision, ApprovalRequest
from orchestrate.approvals import AutoDeny
from orchestrate.engine import Engine
from orchestrate.engine.procinfo import kill_group_if_same, start_time
from orchestrate.entries import PATCH_ADAPTER
from orchestrate.store import Event, Limits

from .helpers import FAKE_CLAUDE, FAST, ROOT, group_members, pid_alive

pytestmark = pytest.mark.anyio

FAKE = {"base_command": [sys.executable, str(FAKE_CLAUDE)]}


def fake(mark: str = "", **options: Any) -> dict[str, Any]:
    """Executor options for the fake Claude; ``mark`` tags its processes' environment for counting."""
    return FAKE | ({"env": {"ORCH_TEST_MARK": mark}} if mark else {}) | options


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def engine_on(url: str, **options: Any) -> Engine:
    options = {"lease": 3.0, "poll": 0.05, "shutdown": FAST} | options
    return Engine.open(url, **options)


async def submit(engine: Engine, prompt: str, tmp_path: Path, mark: str = "", **spec: Any) -> int:
    task = await engine.submit(prompt, "claude-code", executor_options=fake(mark), cwd=tmp_path, **spec)
    return task.id


def line_count(path: str) -> int:
    return len(Path(path).read_bytes().splitlines())


async def all_events(engine: Engine, task_id: int, after: int = 0) -> list[Event]:
    return [e async for e in engine.subscribe(task_id, after=after, follow=False)]


async def test_a_task_runs_and_everything_is_stored(url: str, tmp_path: Path) -> None:
    async with engine_on(url) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task_id = await submit(engine, "plain", tmp_path)
        with anyio.fail_after(20):
            task = await engine.wait(task_id)
        engine.stop()
    assert (task.status, task.attempts, task.error) == ("done", 1, None)
    assert task.session_id and task.input_tokens == 10 and task.cost_usd == pytest.approx(0.001)
    [run] = await engine.runs(task_id)
    assert (run.status, run.outcome, run.exit_code, run.session_id) == ("done", "success", 0, task.session_id)
    assert run.pid and not pid_alive(run.pid) and run.raw_log
    events = await all_events(engine, task_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    states = [e.data["status"] for e in events if e.kind == "state"]
    assert states == ["queued", "running", "done"]
    run_events = [e for e in events if e.run_id == run.id]
    assert [e.run_seq for e in run_events] == list(range(1, len(run_events) + 1))
    # The stored raw records are the raw log, line for line; the patches rebuild the entries.
    raw = [e.data for e in run_events if e.kind == "raw"]
    assert raw[0]["type"] == "header" and len(raw) == line_count(run.raw_log)
    entries: dict[int, Any] = {}
    for e in run_events:
        if e.kind == "patch":
            patch = PATCH_ADAPTER.validate_python(e.data)
            entries[patch.index] = patch.entry
    assert any(e.content == "hello from fake claude" for e in entries.values())


async def test_priority_then_age_decides_what_runs_first(url: str, tmp_path: Path) -> None:
    async with engine_on(url, capacity=1) as engine:
        ids = {}
        for i, priority in enumerate([0, 5, 1, 5, 3, 0]):
            ids[await submit(engine, "plain", tmp_path, priority=priority)] = (-priority, i)
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.work)
            with anyio.fail_after(60):
                for task_id in ids:
                    await engine.wait(task_id)
            engine.stop()
        started = {t: (await engine.runs(t))[0].started_at for t in ids}
    assert sorted(ids, key=lambda t: started[t]) == sorted(ids, key=lambda t: ids[t])


INSTANT_AGENT = """#!/bin/sh
# An agent in Cursor's stream-json that answers at once: 200 of them are quick to run for real.
cat >/dev/null
echo '{"type":"system","subtype":"init","session_id":"s","model":"m","cwd":"/"}'
echo '{"type":"assistant","session_id":"s","message":{"role":"assistant","content":[{"type":"text",'\
'"text":"ok"}]}}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s"}'
"""


async def test_a_queue_of_200_real_runs_goes_by_priority_then_age(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each agent is a real process; containment's supervisor process (tested elsewhere) is left out
    # here only to keep 200 spawns fast.
    monkeypatch.setenv("ORCHESTRATE_SUPERVISOR", "0")
    agent = tmp_path / "agent.sh"
    agent.write_text(INSTANT_AGENT)
    agent.chmod(0o755)
    options = {"base_command": [str(agent)]}
    async with engine_on(url, capacity=4, lease=10.0, log_dir=tmp_path / "logs") as engine:
        want = {}
        for i in range(200):
            priority = (i * 7) % 13 - 3  # every priority many times, negative ones too, out of order
            task = await engine.submit(
                "go", "cursor", executor_options=options, cwd=tmp_path, priority=priority
            )
            want[task.id] = (-priority, task.id)
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.work)
            with anyio.fail_after(90):
                for task_id in want:
                    assert (await engine.wait(task_id)).status == "done"
            engine.stop()
        runs = [(await engine.runs(t))[0] for t in want]
    assert all(run.pid and run.status == "done" for run in runs)
    claimed = [run.task_id for run in sorted(runs, key=lambda r: r.id)]  # run ids are given at the claim
    assert claimed == sorted(want, key=want.__getitem__)


async def test_a_chain_runs_in_order_and_a_failure_blocks_its_dependents(url: str, tmp_path: Path) -> None:
    async with engine_on(url, capacity=4) as engine, anyio.create_task_group() as tg:
        first = await submit(engine, "plain", tmp_path)
        second = await submit(engine, "plain", tmp_path, depends_on=[first], priority=9)
        third = await submit(engine, "plain", tmp_path, depends_on=[second], priority=9)
        broken = await submit(engine, "crash", tmp_path)
        after_broken = await submit(engine, "plain", tmp_path, depends_on=[broken])
        after_that = await submit(engine, "plain", tmp_path, depends_on=[after_broken, first])
        tg.start_soon(engine.work)
        with anyio.fail_after(30):
            for t in (third, after_that):
                await engine.wait(t)
        engine.stop()
    runs = {t: await engine.runs(t) for t in (first, second, third)}
    assert runs[first][0].ended_at <= runs[second][0].started_at  # type: ignore[operator]
    assert runs[second][0].ended_at <= runs[third][0].started_at  # type: ignore[operator]
    assert (await engine.get(third)).status == "done"
    failed = await engine.get(broken)
    assert failed.status == "failed" and failed.error_code == "failed" and failed.error
    assert [r.exit_code for r in await engine.runs(broken)] == [3]
    for t, why in (
        (after_broken, f"task {broken} ended failed"),
        (after_that, f"task {after_broken} is blocked"),
    ):
        task = await engine.get(t)
        assert task.status == "blocked" and why in (task.reason or "")
        assert await engine.runs(t) == []  # never run
        # What a board subscribed to the task's state sees: queued, then blocked with the reason.
        states = [e.data async for e in engine.subscribe(t, kinds={"state"}, follow=False)]
        assert [d["status"] for d in states] == ["queued", "blocked"] and why in states[-1]["reason"]
    states = [e.data["status"] async for e in engine.subscribe(broken, kinds={"state"}, follow=False)]
    assert states == ["queued", "running", "failed"]


def marked_processes(mark: str) -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"ORCH_TEST_MARK={mark}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                if b"supervisor.py" in (entry / "cmdline").read_bytes():
                    continue  # each agent's supervisor (process/containment.py) shares its environment
                stat = (entry / "stat").read_text()
                count += stat[stat.rindex(")") + 2] != "Z"
        except OSError:
            continue
    return count


async def test_per_executor_limit_holds_across_two_workers_under_load(url: str, tmp_path: Path) -> None:
    mark = f"limit-{os.getpid()}-{time.monotonic_ns()}"
    limits = Limits(per_executor={"claude-code": 2})
    seen: list[int] = []
    async with (
        engine_on(url, capacity=6, limits=limits) as one,
        engine_on(url, capacity=6, limits=limits) as two,
    ):
        # Each run streams 5 words 0.1 s apart, so two of them overlap long enough for the
        # watcher to see it on a loaded machine (plain runs ended between its samples: CI saw 1).
        slow = fake(mark) | {"env": {"ORCH_TEST_MARK": mark, "FAKE_SLOW_WORDS": "5"}}
        ids = [
            (await one.submit("slow", "claude-code", executor_options=slow, cwd=tmp_path)).id
            for _ in range(8)
        ]

        async def watch() -> None:
            while True:
                seen.append(await anyio.to_thread.run_sync(marked_processes, mark))
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            tg.start_soon(one.work)
            tg.start_soon(two.work)
            with anyio.fail_after(60):
                for t in ids:
                    assert (await one.wait(t)).status == "done"
            one.stop()
            two.stop()
            tg.cancel_scope.cancel()
        workers = {(await one.runs(t))[0].worker for t in ids}
    assert max(seen) == 2, max(seen)  # reached, never passed
    assert workers  # (which worker took which task is up to the race between them)


async def test_subscribe_from_an_offset_and_reconnect_miss_nothing(url: str, tmp_path: Path) -> None:
    async with engine_on(url, approvals=AutoDeny()) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task_id = await submit(engine, "tool", tmp_path)
        got: list[Event] = []
        with anyio.fail_after(30):
            # Read live, dropping the connection every few events and resuming after the last seq seen.
            while True:
                stream: AsyncIterator[Event] = engine.subscribe(task_id, after=got[-1].seq if got else 0)
                n = 0
                async for event in stream:
                    got.append(event)
                    n += 1
                    if n == 3:
                        break
                await stream.aclose()  # type: ignore[attr-defined]
                if n < 3:
                    break
        engine.stop()
    stored = await all_events(engine, task_id)
    assert got == stored  # nothing missed, nothing twice
    for after in (0, 1, 7, len(stored) - 1, len(stored)):
        assert await all_events(engine, task_id, after) == stored[after:]
    [run] = await engine.runs(task_id)
    run_events = [e async for e in engine.subscribe(run_id=run.id, after=5, follow=False)]
    assert [e.run_seq for e in run_events] == list(range(6, run.last_seq + 1))


async def test_heartbeats_keep_a_long_run_from_the_other_workers_recovery(url: str, tmp_path: Path) -> None:
    # A 5 s run under a 0.6 s lease: only heartbeats keep it; the other worker recovers expired runs on
    # every poll, and would mark this one lost (and kill its agent) the moment its lease ran out.
    async with (
        engine_on(url, lease=0.6) as one,
        engine_on(url, lease=0.6, capacity=1) as two,
        anyio.create_task_group() as tg,
    ):
        task_id = await submit(one, "slow", tmp_path)
        tg.start_soon(one.work)
        with anyio.fail_after(20):
            while not await one.runs(task_id):  # noqa: ASYNC110
                await anyio.sleep(0.02)
            tg.start_soon(two.work)
            task = await one.wait(task_id)
        one.stop()
        two.stop()
    [run] = await one.runs(task_id)
    assert (task.status, task.attempts, run.status, run.worker) == ("done", 1, "done", one.worker)
    assert run.ended_at - run.started_at > 5 * 0.6  # type: ignore[operator]  # it outlived many leases


CANCEL = "from orchestrate.store import Store; import sys; Store.open(sys.argv[1]).cancel(int(sys.argv[2]))"


async def test_cancel_from_another_process(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A 60 s turn: under load the cancelling process may take longer to start than the default 5 s.
    monkeypatch.setenv("FAKE_SLOW_WORDS", "600")
    async with engine_on(url, lease=0.6) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task_id = await submit(engine, "slow", tmp_path)
        with anyio.fail_after(20):
            async for event in engine.subscribe(task_id):
                if event.kind == "patch" and "w2" in str(event.data):
                    break
            await anyio.run_process([sys.executable, "-c", CANCEL, url, str(task_id)], cwd=ROOT)
            task = await engine.wait(task_id)
        engine.stop()
    [run] = await engine.runs(task_id)
    assert (task.status, run.status, run.outcome) == ("cancelled", "cancelled", "cancelled")
    states = [e.data["status"] async for e in engine.subscribe(task_id, kinds={"state"}, follow=False)]
    assert states == ["queued", "running", "cancelled"]
    assert run.pid and group_members(run.pid) == []


WORKER = textwrap.dedent(
    """
    import sys, anyio
    from orchestrate.engine import Engine
    async def main():
        async with Engine.open(sys.argv[1], lease=1.5, poll=0.05) as engine:
            await engine.work()
    anyio.run(main)
    """
)


def start_worker(url: str, tmp_path: Path, **env: str) -> subprocess.Popen[bytes]:
    with (tmp_path / "worker.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-c", WORKER, url],
            cwd=ROOT,
            env=os.environ | {"PYTHONPATH": str(ROOT)} | env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def stop_worker(proc: subprocess.Popen[bytes], tmp_path: Path) -> None:
    proc.kill()
    proc.wait(5)
    print((tmp_path / "worker.log").read_text())


@pytest.fixture
def worker(url: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A worker in its own process on the test's store; what it prints is shown if the test fails."""
    proc = start_worker(url, tmp_path)
    yield proc
    stop_worker(proc, tmp_path)


@pytest.fixture
def uncontained_worker(url: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A worker whose agents are only in their own process group (as off Linux): its agents can
    outlive it, which is what recovery must then clean up."""
    proc = start_worker(url, tmp_path, ORCHESTRATE_SUPERVISOR="0")
    yield proc
    stop_worker(proc, tmp_path)


async def test_a_killed_worker_is_recovered_resumed_and_numbered_on(
    url: str, tmp_path: Path, worker: subprocess.Popen[bytes]
) -> None:
    async with engine_on(url, lease=0.6) as engine:
        task_id = await submit(engine, "slow", tmp_path, max_attempts=2)
        with anyio.fail_after(20):
            async for event in engine.subscribe(task_id):
                if event.kind == "patch" and "w3" in str(event.data):
                    break
            while not (run := (await engine.runs(task_id))[0]).session_id or not run.pid:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        worker.send_signal(signal.SIGKILL)
        worker.wait(5)
        before = (await engine.get(task_id)).last_seq
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.work)
            with anyio.fail_after(30):
                task = await engine.wait(task_id)
            engine.stop()
        first, second = await engine.runs(task_id)
    assert run.pid and group_members(run.pid) == []  # nothing left of the dead worker's agent
    assert first.status == "lost" and first.error_code == "lost"
    assert (second.attempt, second.parent_run_id, second.resume_token) == (2, first.id, first.session_id)
    assert task.status == "done" and task.notice is None  # the session was resumed, no continuity notice
    events = await all_events(engine, task_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert min(e.seq for e in events if e.run_id == second.id) > before
    assert [e.data["status"] for e in events if e.kind == "state"] == [
        "queued",
        "running",
        "queued",
        "running",
        "done",
    ]
    assert "lost" in [e.data for e in events if e.kind == "state"][2]["reason"]  # retried because lost


async def test_a_retry_whose_session_is_gone_starts_fresh_and_says_so(url: str, tmp_path: Path) -> None:
    async with engine_on(url, lease=0.6) as engine:
        task_id = await submit(engine, "plain", tmp_path, max_attempts=2)
        claimed = engine.store.claim("gone-host:1:x", Limits(), 0.05)
        assert claimed is not None
        engine.store.set_session(claimed[1].id, "missing")  # a session the agent no longer has
        await anyio.sleep(0.1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.work)
            with anyio.fail_after(20):
                task = await engine.wait(task_id)
            engine.stop()
        lost, retry = await engine.runs(task_id)
    assert lost.status == "lost" and retry.resume_token == "missing"
    assert task.status == "done" and task.notice and "could not be resumed" in task.notice
    assert retry.session_id and retry.session_id != "missing"
    notices = [e for e in await all_events(engine, task_id) if e.kind == "notice"]
    assert notices and "fresh session" in notices[0].data["notice"]


async def test_recovery_kills_an_agent_that_outlived_its_worker(
    url: str, tmp_path: Path, uncontained_worker: subprocess.Popen[bytes]
) -> None:
    worker = uncontained_worker
    async with engine_on(url, lease=0.6) as engine:
        task_id = await submit(engine, "hang", tmp_path)  # ignores SIGTERM and stdin EOF; has a child
        with anyio.fail_after(20):
            async for event in engine.subscribe(task_id):
                if event.kind == "raw" and "fake_child" in str(event.data):
                    break
        [run] = await engine.runs(task_id)
        worker.send_signal(signal.SIGKILL)
        worker.wait(5)
        assert run.pid and len(group_members(run.pid)) == 2  # the agent and its child live on
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.work)
            with anyio.fail_after(20):
                task = await engine.wait(task_id)
            engine.stop()
        [lost] = await engine.runs(task_id)
    assert group_members(run.pid) == []
    assert (task.status, lost.status, lost.error_code) == ("lost", "lost", "lost")
    states = [e.data["status"] async for e in engine.subscribe(task_id, kinds={"state"}, follow=False)]
    assert states == ["queued", "running", "lost"]
    assert "stopped renewing its lease" in (lost.error or "")


def test_a_reused_pid_is_never_killed() -> None:
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        started = start_time(proc.pid)
        assert started is not None
        assert not kill_group_if_same(proc.pid, str(int(started) + 1))  # another process's start time
        assert not kill_group_if_same(proc.pid, None)
        assert pid_alive(proc.pid)
        assert kill_group_if_same(proc.pid, started)
        assert proc.wait(5) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait(5)


class ApproveLater:
    """Approves after a while, so the agent goes on (and writes events) while the test holds the lock."""

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        await anyio.sleep(0.3)
        return ApprovalDecision.approve()


async def test_a_locked_store_delays_events_loses_none_and_says_so(url: str, tmp_path: Path) -> None:
    db = url.removeprefix("sqlite:///")
    async with (
        engine_on(url, busy_timeout=0.05, approvals=ApproveLater()) as engine,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(engine.work)
        task_id = await submit(engine, "tool", tmp_path)
        with anyio.fail_after(20):
            async for event in engine.subscribe(task_id):
                if event.kind == "patch" and "pending_approval" in str(event.data):
                    break
            holder = sqlite3.connect(db, isolation_level=None)
            holder.execute("BEGIN EXCLUSIVE")  # another program holds the write lock while the run ends
            await anyio.sleep(1.5)
            holder.execute("ROLLBACK")
            holder.close()
            task = await engine.wait(task_id)
            # The engine went on: the next task runs as usual.
            assert (await engine.wait(await submit(engine, "plain", tmp_path))).status == "done"
        engine.stop()
    assert task.status == "done"
    assert task.notice and "database is locked" in task.notice and "resumed" in task.notice
    [run] = await engine.runs(task_id)
    events = await all_events(engine, task_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len([e for e in events if e.kind == "raw"]) == line_count(run.raw_log or "")
    assert any("ran: echo original" in str(e.data) for e in events if e.kind == "patch")


async def test_a_task_that_cannot_start_fails_with_a_reason_and_the_engine_goes_on(
    url: str, tmp_path: Path
) -> None:
    async with engine_on(url) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        unknown = await engine.submit("plain", "no-such-agent", cwd=tmp_path)
        bad = await engine.submit("plain", "claude-code", executor_options={"nonsense": 1}, cwd=tmp_path)
        with anyio.fail_after(20):
            results = [await engine.wait(t.id) for t in (unknown, bad)]
            assert (await engine.wait(await submit(engine, "plain", tmp_path))).status == "done"
        engine.stop()
    assert [t.status for t in results] == ["failed"] * 2
    assert "no-such-agent" in (results[0].error or "")
    assert "nonsense" in (results[1].error or "")


@pytest.mark.anyio
async def test_a_worker_started_while_another_program_holds_the_store_waits_to_enter(
    url: str, tmp_path: Path
) -> None:
    """A worker entering itself on the store (the workers table) while another program holds the
    write lock waits for it, bounded, as every other write does; it used to stop at once with a
    busy error (seen in CI: the locked-store test's worker started just after the lock was taken)."""
    if not url.startswith("sqlite:///"):
        pytest.skip("the lock is taken with sqlite3")
    async with engine_on(url, busy_timeout=0.05) as engine:
        holder = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")

        async def release() -> None:
            await anyio.sleep(0.6)
            holder.execute("ROLLBACK")
            holder.close()

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(release)
                await engine.enter()
        assert engine._entered
