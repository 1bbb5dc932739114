"""The board's commands on the Temporal backend: `orchestrate follow`, `tasks`, `cancel` and `send` from
other processes, and a cancel through Temporal itself, all meeting the same store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio

from orchestrate.store import TaskSpec

from .helpers import ROOT
from .temporal_cluster import Cluster


def cli(cluster: Cluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrate", *args, "--store", cluster.url],
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_follow_tasks_cancel_and_send_work_the_same(cluster: Cluster) -> None:
    cluster.start("one")
    done = cluster.submit("plain")
    asking = cluster.submit("tool")  # waits for an approval nobody gives: running until cancelled
    deadline = time.monotonic() + 30
    while not cluster.store.approvals(task_id=asking):
        assert time.monotonic() < deadline, cluster.log("one")
        time.sleep(0.05)
    assert cli(cluster, "cancel", str(asking)).returncode == 0
    followed = cli(cluster, "follow", str(done))
    assert followed.returncode == 0 and "hello from fake claude" in followed.stdout, followed.stderr
    # A follow-up to the finished task: queued again in the store, a new turn through Temporal.
    assert cli(cluster, "send", str(done), "plain again").returncode == 0
    cluster.wait([asking], 30)
    deadline = time.monotonic() + 30
    while len(runs := cluster.store.runs(done)) < 2 or not cluster.store.get(done).finished:
        assert time.monotonic() < deadline, cluster.log("one")
        time.sleep(0.05)
    listed = json.loads(cli(cluster, "tasks", "--json").stdout)
    assert {t["id"]: t["status"] for t in listed} == {done: "done", asking: "cancelled"}
    [cancelled] = cluster.store.runs(asking)
    assert cancelled.status == "cancelled"
    assert [a.status for a in cluster.store.approvals(task_id=asking, status=None)] == ["withdrawn"]
    first, turn = runs
    assert (turn.kind, turn.prompt, turn.resume_token) == ("follow_up", "plain again", first.session_id)
    events = cluster.store.events(task_id=done, limit=10_000)
    assert any(e.run_id == turn.id and "resumed: plain again" in str(e.data) for e in events)


def test_a_cancel_through_temporal_is_recorded_in_the_store(cluster: Cluster) -> None:
    from orchestrate.engine.temporal import connect, workflow_id

    cluster.start("one")
    # A blocker that never ends by itself ("hang": hello, then nothing): the dependent cannot be let
    # through before its cancel arrives, however late a loaded machine starts its workflow.
    blocker = cluster.submit("hang")
    waiting = cluster.submit("plain", depends_on=[blocker])  # its workflow waits for the dependency

    async def cancel() -> None:
        client = await connect(cluster.address)
        handle = client.get_workflow_handle(workflow_id(waiting, cluster.prefix))
        with anyio.fail_after(30):
            while True:  # the dispatcher starts it within a poll
                try:
                    await handle.describe()
                    break
                except Exception:
                    await anyio.sleep(0.05)
        await handle.cancel()
        with anyio.fail_after(30):
            while cluster.store.get(waiting).status != "cancelled":  # noqa: ASYNC110
                await anyio.sleep(0.05)
        handle = client.get_workflow_handle(workflow_id(blocker, cluster.prefix))
        await handle.cancel()  # a running turn: cancelled through its heartbeat

    anyio.run(cancel)
    cluster.wait([waiting, blocker], 30)
    assert cluster.store.get(waiting).status == "cancelled" and cluster.store.runs(waiting) == []
    assert cluster.store.get(blocker).status == "cancelled"
    [run] = cluster.store.runs(blocker)
    assert run.status == "cancelled"


def test_a_dependent_waits_its_turn_and_every_workflow_completes(cluster: Cluster) -> None:
    from .temporal_cluster import workflow_states

    cluster.start("one")
    first = cluster.submit("slow")
    second = cluster.submit("plain", depends_on=[first], priority=5)
    cluster.wait([first, second], 40)
    [a], [b] = cluster.store.runs(first), cluster.store.runs(second)
    assert cluster.store.get(second).status == "done"
    assert a.ended_at is not None and b.started_at is not None and a.ended_at <= b.started_at
    assert workflow_states(cluster, [first, second]) == {"COMPLETED"}


def test_an_interrupt_from_another_process_ends_the_turn_not_the_task(cluster: Cluster) -> None:
    """`orchestrate interrupt` in another process reaches the agent on the Temporal worker that runs
    the turn: the agent stops the turn its own way, and the message sent meanwhile is the task's next
    turn, in the same session, through the same workflow."""
    from .temporal_cluster import workflow_states

    cluster.start("one")
    from .temporal_cluster import FAKE

    # The slow turn streams a word every 0.1 s for a minute unless interrupted.
    options = FAKE | {"env": {"ORCH_TEST_MARK": cluster.mark, "FAKE_SLOW_WORDS": "600"}}
    spec = TaskSpec(prompt="slow", executor="claude-code", executor_options=options, cwd=cluster.tmp)
    task_id = cluster.store.submit(spec).id
    deadline = time.monotonic() + 30
    while not (runs := cluster.store.runs(task_id)) or not runs[0].session_id:
        assert time.monotonic() < deadline, cluster.log("one")
        time.sleep(0.05)
    # Interrupt and steer: the message is sent first (the turn is running: it waits), then the
    # interrupt asked, from one process.
    asked = cli(cluster, "interrupt", str(task_id), "plain after the interrupt")
    assert asked.returncode == 0 and "interrupt requested" in asked.stdout, asked.stderr
    deadline = time.monotonic() + 30
    while not (task := cluster.store.get(task_id)).finished or task.attempts < 2:
        assert time.monotonic() < deadline, cluster.log("one")
        time.sleep(0.05)
    first, turn = cluster.store.runs(task_id)  # read after the task ended: both runs are over
    assert (first.status, first.outcome) == ("interrupted", "interrupted"), first
    assert (turn.kind, turn.status, turn.resume_token) == ("follow_up", "done", first.session_id)
    assert task.status == "done" and not task.interrupt_requested and not task.cancel_requested
    events = cluster.store.events(task_id=task_id, limit=10_000)
    said = "".join(str(e.data) for e in events if e.run_id == first.id)
    assert "w3 " in said and "w599" not in said  # it streamed, and was stopped well before its end
    assert any(e.run_id == turn.id and "resumed: plain after the interrupt" in str(e.data) for e in events)
    assert workflow_states(cluster, [task_id]) == {"COMPLETED"}
    # Only a running turn can be interrupted: the ended task says so, and nothing changes.
    late = cli(cluster, "interrupt", str(task_id))
    assert late.returncode != 0 and "only a running turn" in late.stderr, late
    assert not cluster.store.get(task_id).interrupt_requested


def test_plain_and_temporal_workers_refuse_to_share_a_store(cluster: Cluster) -> None:
    """Each kind of worker refuses a store a live worker of the other kind works, says why and how to
    go on, and exits 1; a worker that stopped, or died on this machine, no longer counts."""
    temporal = cluster.start("one")
    plain = cli(cluster, "worker", "--poll", "0.05", timeout=30)
    assert plain.returncode == 1, plain
    assert "worked by a Temporal worker" in plain.stderr and "cannot share a store" in plain.stderr
    assert "Traceback" not in plain.stderr
    temporal.send_signal(signal.SIGTERM)
    assert temporal.wait(20) == 0, cluster.log("one")
    # The Temporal worker left: a plain worker may start, and now a Temporal one is refused.
    log = cluster.tmp / "plain.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "orchestrate", "worker", "--store", cluster.url, "--poll", "0.05"],
            env=os.environ | {"PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while b" on " not in log.read_bytes():
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        refused = subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestrate",
                "worker",
                "--temporal",
                cluster.address,
                "--store",
                cluster.url,
            ],
            env=os.environ | {"PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert refused.returncode == 1 and "worked by a plain worker" in refused.stderr, refused
        worker.kill()  # dies without leaving: its pid is gone, so its entry no longer counts
        worker.wait(10)
        task_id = cluster.submit("plain")
        cluster.start("two")
        cluster.wait([task_id], 30)
        assert cluster.store.get(task_id).status == "done"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)


def test_the_board_serves_a_temporal_store_end_to_end(cluster: Cluster, tmp_path: Path) -> None:
    """`orchestrate serve --no-worker` on a store Temporal workers work: a task submitted through the API
    is run by a Temporal worker, its events and the board's changes arrive over SSE.  Serve with its own
    worker is refused there, before it starts."""
    from .temporal_cluster import FAKE
    from .test_serve_api import Stream, start_server

    cluster.start("one")
    home = tmp_path / "home"
    env = os.environ | {"PYTHONPATH": str(ROOT), "ORCHESTRATE_HOME": str(home)}
    refused = subprocess.run(
        [sys.executable, "-m", "orchestrate", "serve", "--store", cluster.url, "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 1 and "worked by a Temporal worker" in refused.stderr, refused
    assert "--no-worker" in refused.stderr and "Traceback" not in refused.stderr
    server = start_server(home, store=cluster.url, worker=False)
    try:
        with server.client() as http:
            board = Stream(http, "/api/stream")
            options = FAKE | {"env": {"ORCH_TEST_MARK": cluster.mark}}
            body = {"prompt": "plain", "executor": "claude-code", "cwd": str(cluster.tmp)}
            created = http.post("/api/tasks", json=body | {"executor_options": options})
            assert created.status_code == 201, created.text
            task_id = int(created.json()["task"]["id"])
            events = Stream(http, f"/api/tasks/{task_id}/stream")
            try:
                seen = events.until(lambda m: m.event == "state" and m.data["data"]["status"] == "done")
                changes = board.until(lambda m: m.data["id"] == task_id and m.data["status"] == "done")
            finally:
                events.close()
                board.close()
            # An interrupt through the API when no turn runs: refused, the task as it was.
            late = http.post(f"/api/tasks/{task_id}/interrupt")
            assert late.status_code == 409 and late.json()["error"]["code"] == "invalid_state", late.text
    finally:
        server.stop()
    assert any(m.event == "patch" and "hello from fake claude" in json.dumps(m.data) for m in seen)
    mine = [m for m in changes if m.data["id"] == task_id]
    assert [m.data["status"] for m in mine][-1] == "done" and all(m.id and m.id.isdigit() for m in mine)
    [run] = cluster.store.runs(task_id)
    assert run.status == "done" and f"worker {run.worker} on " in cluster.log("one")  # Temporal's worker
