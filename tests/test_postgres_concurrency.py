"""Several OS processes racing on one store, on SQLite and on Postgres: event numbers, claims under
limits, lease recovery, and approval answers.  Each child connects, says it is ready, and waits for the
word to go, which all get at once, so the races really overlap; what they did is read back from the store
afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

from orchestrate.store import Limits, Store

from .helpers import ROOT
from .test_store import spec

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from orchestrate.store import Limits, RunEnd, Store
    url, role, me, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    store = Store.open(url)
    store.get(1)  # connected
    print("ready", flush=True)
    sys.stdin.readline()
    out = {}
    if role == "events":
        a, ra, b, rb = args["a"], args["ra"], args["b"], args["rb"]
        for i in range(args["n"]):
            # Both tasks in one batch, in either order; the run's session and lease written meanwhile:
            # the orders in which rows are locked differ, the numbers must not.
            body = json.dumps({"w": me, "i": i})
            pair = [(b, rb, "notice", body, 0.0), (a, ra, "notice", body, 0.0)]
            store.append(pair if i % 2 else pair[::-1])
            if i % 5 == 0:
                store.set_session(rb if i % 2 else ra, f"s-{me}-{i}")
                store.heartbeat("w", [rb, ra], 60)
    elif role == "claim":
        limits = Limits(per_executor={"x": args["limit"]})
        mine = []
        while True:
            got = store.claim(me, limits, 60)
            if got is None:
                if not store.list_tasks(status="queued"):
                    break
                time.sleep(0.005)
                continue
            task, run = got
            mine.append(task.id)
            time.sleep(0.01)
            store.finish_run(run.id, RunEnd(status="done", outcome="success"), "done")
        out["claimed"] = mine
    elif role == "recover":
        out["won"] = store.mark_lost(args["run"], by=me) is not None
    elif role == "answer":
        decision = "approved" if int(me[1:]) % 2 else "denied"
        won, record = store.answer_approval(args["approval"], decision, by=me)
        out = {"won": won, "decision": record.decision, "by": record.answered_by}
    store.close()
    print(json.dumps(out))
    """
)


def race(url: str, role: str, count: int, **args: object) -> list[dict[str, object]]:
    """Run ``count`` children of ``role`` at once; their JSON results, in order."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, url, role, f"p{n}", json.dumps(args)],
            cwd=ROOT,
            env=os.environ | {"PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(count)
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n", proc.stderr.read().decode() if proc.stderr else ""
    for proc in procs:  # go: all at once
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()[-3000:]
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    return results


def test_event_numbers_never_repeat_or_skip_across_processes(url: str) -> None:
    with Store.open(url) as s:
        a = s.submit(spec()).id
        b = s.submit(spec()).id
        _, ra = s.claim("w", Limits(), 60)  # type: ignore[misc]
        _, rb = s.claim("w", Limits(), 60)  # type: ignore[misc]
    race(url, "events", 3, a=a, ra=ra.id, b=b, rb=rb.id, n=40)
    with Store.open(url) as s:
        for task_id, run in ((a, ra), (b, rb)):
            evs = s.events(task_id=task_id, limit=10_000)
            assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
            run_evs = s.events(run_id=run.id, limit=10_000)
            assert [e.run_seq for e in run_evs] == list(range(1, 3 * 40 + 1))
            for n in range(3):  # each writer's events in the order it wrote them
                mine = [e.data["i"] for e in run_evs if e.data["w"] == f"p{n}"]
                assert mine == list(range(40))


def test_claims_take_each_task_once_and_hold_the_limit_across_processes(url: str) -> None:
    with Store.open(url) as s:
        ids = [s.submit(spec(executor="x" if i % 4 else "y")).id for i in range(24)]
    results = race(url, "claim", 4, limit=2)
    claimed = [t for r in results for t in r["claimed"]]  # type: ignore[attr-defined]
    assert sorted(claimed) == ids  # every task, none twice
    assert sum(1 for r in results if r["claimed"]) >= 2  # the race was real: several processes won some
    with Store.open(url) as s:
        spans = []
        for task_id in ids:
            [run] = s.runs(task_id)
            assert s.get(task_id).status == "done"
            if s.get(task_id).executor == "x":
                spans.append((run.started_at, run.ended_at))
    # At no instant were more than 2 runs of executor x live (each start saw the previous end committed).
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    live = peak = 0
    for _, step in edges:
        live += step
        peak = max(peak, live)
    assert peak == 2


def test_one_process_recovers_an_expired_run(url: str) -> None:
    with Store.open(url) as s:
        task = s.submit(spec(max_attempts=2))
        _, run = s.claim("dead-host:1:x", Limits(), 0.05)  # type: ignore[misc]
    time.sleep(0.1)
    results = race(url, "recover", 4, run=run.id)
    assert sorted(r["won"] for r in results) == [False] * 3 + [True]  # type: ignore[type-var]
    with Store.open(url) as s:
        assert s.run(run.id).status == "lost" and s.get(task.id).status == "queued"
        states = [e.data["status"] for e in s.events(task_id=task.id) if e.kind == "state"]
        assert states == ["queued", "running", "queued"]  # recovered once, not six times


def test_the_first_answer_wins_among_processes(url: str) -> None:
    with Store.open(url) as s:
        s.submit(spec())
        _, run = s.claim("w", Limits(), 60)  # type: ignore[misc]
        approval = s.open_approval(run.id, {"tool_name": "Bash", "command": "rm -rf build"})
    results = race(url, "answer", 4, approval=approval.id)  # half approve, half deny
    winners = [r for r in results if r["won"]]
    assert len(winners) == 1
    (winner,) = winners
    assert all((r["decision"], r["by"]) == (winner["decision"], winner["by"]) for r in results)
    with Store.open(url) as s:
        final = s.approval(approval.id)
        assert final.status == "answered"
        assert (final.decision, final.answered_by) == (winner["decision"], winner["by"])
        assert s.get(final.task_id).status == "running"


def test_a_task_asks_for_itself_within_limits_and_priority(url: str) -> None:
    """What a workflow per task asks of the store: this task, if it is runnable and nothing better waits."""
    with Store.open(url) as s:
        low = s.submit(spec(executor="x")).id
        high = s.submit(spec(executor="x", priority=5)).id
        later = s.submit(spec(executor="x", depends_on=[high])).id
        assert s.claim("w", Limits(), 60, task_id=low) is None  # a higher priority waits
        assert s.claim("w", Limits(), 60, task_id=later) is None  # its dependency is not done
        got = s.claim("w", Limits(per_executor={"x": 1}), 60, task_id=high)
        assert got is not None and got[0].id == high
        assert s.claim("w", Limits(per_executor={"x": 1}), 60, task_id=low) is None  # the limit is full
        assert s.claim("w", Limits(), 60, task_id=low) is not None
        assert s.queued() == [later]


def test_take_over_loses_the_live_run_and_resumes_its_session(url: str) -> None:
    with Store.open(url) as s:
        task = s.submit(spec(max_attempts=2))
        _, run = s.claim("dead-host:1:x", Limits(), 3600)  # type: ignore[misc]
        s.set_session(run.id, "sess-1")
        approval = s.open_approval(run.id, {"tool_name": "Bash"})
        [taken] = s.take_over(task.id, "new", "its worker stopped heartbeating")
        assert taken.id == run.id  # the lease had an hour left: Temporal's word is enough
        assert s.run(run.id).status == "lost" and "taken over by new" in (s.run(run.id).error or "")
        assert s.approval(approval.id).status == "withdrawn"
        assert s.take_over(task.id, "other", "again") == []  # nothing live: nothing to take
        assert s.heartbeat("dead-host:1:x", [run.id], 60) == set()  # the old worker learns it
        _, second = s.claim("new", Limits(), 60, task_id=task.id)  # type: ignore[misc]
        assert (second.attempt, second.resume_token) == (2, "sess-1")
        s.take_over(task.id, "third", "again")
        assert s.get(task.id).status == "lost"  # no attempts left
