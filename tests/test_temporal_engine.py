"""The engine on Temporal, end to end: a real dev server (``temporal server start-dev``), a real Postgres,
workers as separate ``orchestrate worker --temporal`` processes, the fake Claude as the agent.

Each test has its own database, task queue and workflow prefix, so tests sharing the session's server
never see each other's workflows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from .helpers import ROOT, group_members
from .temporal_cluster import Cluster, workflow_states
from .test_engine import marked_processes


def test_two_workers_run_fifty_tasks_once_each_within_the_limit(cluster: Cluster) -> None:
    # No worker dies here, so no turn needs the cluster's short heartbeat timeout (1.5 s, for the
    # recovery tests): on a loaded machine (two test workers, load ~6) turns missed it, were
    # cancelled, and a task did not end done.  The limit and the spread are what this test is for.
    limit = ("--per-executor", "claude-code=3", "--heartbeat-timeout", "10")
    cluster.start("one", *limit)
    cluster.start("two", *limit)
    ids = [cluster.submit("plain") for _ in range(50)]
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(marked_processes(cluster.mark))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        cluster.wait(ids, 150)
    finally:
        stop.set()
        watcher.join(5)
    runs = {t: cluster.store.runs(t) for t in ids}
    assert all(cluster.store.get(t).status == "done" for t in ids)
    assert all(len(r) == 1 and r[0].attempt == 1 for r in runs.values())  # none ran twice
    workers = {r[0].worker for r in runs.values()}
    assert len(workers) == 2, workers  # both workers took turns
    # Agent processes of this test alive at once, sampled every 10 ms: the limit is held across workers.
    assert max(seen) <= 3, max(seen)
    assert max(seen) >= 2  # and the two workers did run turns side by side
    assert workflow_states(cluster, ids) == {"COMPLETED"}  # every workflow returned; none failed
    for t in ids[:3]:  # what the agent printed is in the store, numbered, not in workflow history
        events = cluster.store.events(task_id=t)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert any(e.kind == "patch" and "hello from fake claude" in str(e.data) for e in events)


def test_an_approval_answered_from_another_process_reaches_the_worker(cluster: Cluster) -> None:
    cluster.start("one")
    asked = cluster.submit("tool")
    timed = cluster.submit("tool", run_options={"approval_timeout": 0.5})
    deadline = time.monotonic() + 30
    while not (waiting := cluster.store.approvals(task_id=asked)):
        assert time.monotonic() < deadline, cluster.log("one")
        time.sleep(0.05)
    [approval] = waiting
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "orchestrate"]
    yes = subprocess.run(
        [*cli, "approve", str(approval.id), "--store", cluster.url], env=env, capture_output=True, timeout=60
    )
    assert yes.returncode == 0, yes.stderr.decode()
    late = subprocess.run(
        [*cli, "deny", str(approval.id), "--store", cluster.url], env=env, capture_output=True, timeout=60
    )
    assert late.returncode == 1 and b"already answered" in late.stderr  # the first answer won
    cluster.wait([asked, timed], 30)
    task = cluster.store.get(asked)
    assert task.status == "done"
    events = cluster.store.events(task_id=asked)
    assert any(e.kind == "patch" and "ran: echo" in str(e.data) for e in events)  # the agent ran it
    [expired] = cluster.store.approvals(task_id=timed, status=None)
    assert (expired.status, expired.decision) == ("answered", "timed_out")  # no answer: denied
    timed_events = cluster.store.events(task_id=timed)
    assert not any(e.kind == "patch" and "ran: echo" in str(e.data) for e in timed_events)


def test_a_worker_killed_mid_turn_is_finished_by_the_other_after_a_resume(cluster: Cluster) -> None:
    # (The first turn streams for 60 s, so it is still running when the signal comes however
    # long the second worker takes to start on a loaded machine; the resumed turn streams 5 s.)
    first = cluster.start("one", env={"FAKE_SLOW_WORDS": "600"})
    task_id = cluster.submit("slow", max_attempts=2)
    deadline = time.monotonic() + 30
    while True:
        runs = cluster.store.runs(task_id)
        if runs and runs[0].session_id and runs[0].pid:
            events = cluster.store.events(task_id=task_id, limit=10_000)
            if any(e.kind == "patch" and "w3" in str(e.data) for e in events):
                break
        assert time.monotonic() < deadline, cluster.log("one")
        time.sleep(0.05)
    cluster.start("two")
    before = cluster.store.get(task_id).last_seq
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    cluster.wait([task_id], 45)
    lost, second = cluster.store.runs(task_id)
    task = cluster.store.get(task_id)
    assert task.status == "done" and task.notice is None  # resumed: no "fresh session" notice
    assert lost.status == "lost" and "heartbeat" in (lost.error or "")
    assert (second.attempt, second.parent_run_id, second.resume_token) == (2, lost.id, lost.session_id)
    assert second.worker != lost.worker and second.session_id == lost.session_id
    events = cluster.store.events(task_id=task_id, limit=100_000)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # numbered on, no gap, no repeat
    assert min(e.seq for e in events if e.run_id == second.id) > before
    assert lost.pid and group_members(lost.pid) == []  # nothing left of the dead worker's agent
    assert marked_processes(cluster.mark) == 0


def test_a_worker_that_missed_its_heartbeats_does_not_cancel_the_task(cluster: Cluster) -> None:
    """A worker stopped past the heartbeat timeout (a loaded machine, a laptop's sleep) is told by
    Temporal that its turn timed out: the turn is retried, and the task is not the user's cancel."""
    # A 5 s heartbeat timeout, not the cluster's 1.5 s: on a loaded machine (two test workers) the
    # retried attempt missed that one too, and with it the task's last attempt (the task ended lost,
    # as it should then).  The stop is longer than the timeout; the attempts leave a spare.
    one = cluster.start("one", "--heartbeat-timeout", "5", env={"FAKE_SLOW_WORDS": "120"})
    task_id = cluster.submit("slow", max_attempts=3)
    deadline = time.monotonic() + 30
    while not any(
        e.kind == "patch" and "w3" in str(e.data) for e in cluster.store.events(task_id=task_id, limit=10_000)
    ):
        assert time.monotonic() < deadline, cluster.log("one")
        time.sleep(0.05)
    one.send_signal(signal.SIGSTOP)  # past the heartbeat timeout
    time.sleep(8)
    one.send_signal(signal.SIGCONT)
    cluster.wait([task_id], 60)
    task = cluster.store.get(task_id)
    runs = cluster.store.runs(task_id)
    assert task.status == "done", (
        task.status,
        task.reason,
        [(r.status, r.error) for r in runs],
        cluster.log("one"),
    )
    assert [r.status for r in runs] == ["lost", "done"] and runs[1].attempt == 2
    assert marked_processes(cluster.mark) == 0


def test_the_next_worker_on_the_machine_reaps_what_a_dead_worker_left(cluster: Cluster) -> None:
    """Without the supervisor (as off Linux) an agent outlives its SIGKILLed worker; the next worker that
    starts on this machine kills it, and Temporal's retry then finds no attempts left and says so."""
    first = cluster.start("one", env={"ORCHESTRATE_SUPERVISOR": "0"})
    task_id = cluster.submit("hang")  # ignores SIGTERM and stdin EOF; has a child
    deadline = time.monotonic() + 30
    while not any(
        e.kind == "raw" and "fake_child" in str(e.data) for e in cluster.store.events(task_id=task_id)
    ):
        assert time.monotonic() < deadline, cluster.log("one")
        time.sleep(0.05)
    [run] = cluster.store.runs(task_id)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    assert run.pid and len(group_members(run.pid)) == 2  # the agent and its child live on
    cluster.start("two")
    assert f"killed the agent of dead run {run.id}" in cluster.log("two")
    assert group_members(run.pid) == []
    cluster.wait([task_id], 30)
    assert cluster.store.get(task_id).status == "lost"  # one attempt, its worker gone: lost, said so


def test_a_worker_stopped_by_sigterm_hands_its_turn_on(cluster: Cluster) -> None:
    """A rolling restart: the stopped worker stops its agent and records nothing; Temporal retries the
    turn on the other worker, which takes the run over and resumes the session."""
    # (The first turn streams for 60 s, so it is still running when the signal comes however
    # long the second worker takes to start on a loaded machine; the resumed turn streams 5 s.)
    first = cluster.start("one", env={"FAKE_SLOW_WORDS": "600"})
    task_id = cluster.submit("slow", max_attempts=2)
    deadline = time.monotonic() + 30
    while not (runs := cluster.store.runs(task_id)) or not runs[0].session_id:
        assert time.monotonic() < deadline, cluster.log("one")
        time.sleep(0.05)
    cluster.start("two")
    first.send_signal(signal.SIGTERM)
    assert first.wait(20) == 0, cluster.log("one")
    cluster.wait([task_id], 45)
    handed, resumed = cluster.store.runs(task_id)
    assert cluster.store.get(task_id).status == "done"
    assert handed.status == "lost" and resumed.resume_token == handed.session_id
    assert resumed.worker != handed.worker
    assert marked_processes(cluster.mark) == 0
