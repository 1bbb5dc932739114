"""Approvals that wait in the store: any process answers, the first answer wins, a timeout denies, a
run that stops waiting withdraws its request."""

from __future__ import annotations

import sys
import textwrap
import threading
from pathlib import Path

import anyio
import orjson
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from orchestrate.engine import Engine
from orchestrate.store import AlreadyAnsweredError, Event, Limits, Store, TaskSpec

from .helpers import ROOT
from .test_engine import all_events, engine_on, submit, url  # noqa: F401  (url: the shared fixture)

pytestmark = pytest.mark.anyio

ANSWER = textwrap.dedent(
    """
    import json, os, sys, time
    from orchestrate.store import Store
    url, approval, decision, who, go = sys.argv[1:]
    store = Store.open(url)
    store.approval(int(approval))  # connected and warm before the start
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    won, record = store.answer_approval(int(approval), decision, "not this one", by=who)
    print(json.dumps({"won": won, "decision": record.decision, "by": record.answered_by}), flush=True)
    """
)


async def waiting_for_approval(engine: Engine, task_id: int) -> Event:
    async for event in engine.subscribe(task_id):
        if event.kind == "state" and event.data["status"] == "waiting_approval":
            return event
    raise AssertionError("the task ended without asking")


def tool_status(events: list[Event]) -> str:
    tools = [
        e.data["entry"]["type"]["tool"]
        for e in events
        if e.kind == "patch" and "tool" in e.data["entry"]["type"]
    ]
    return str(tools[-1]["status"])


async def test_two_processes_answer_at_once_and_the_first_answer_wins(
    url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    async with engine_on(url) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task_id = await submit(engine, "tool", tmp_path)
        with anyio.fail_after(30):
            asked = await waiting_for_approval(engine, task_id)
            approval_id = asked.data["approval_id"]
            assert asked.data["command"] == "echo original"
            assert (await engine.get(task_id)).status == "waiting_approval"
            [open_one] = await engine.approvals(task_id)
            assert open_one.id == approval_id and open_one.request["tool_name"] == "Bash"
            go = tmp_path / "go"
            answerers = []
            for decision, who in (("approved", "alice"), ("denied", "bob")):
                argv = [sys.executable, "-c", ANSWER, url, str(approval_id), decision, who, str(go)]
                proc = await anyio.open_process(argv, cwd=ROOT, stderr=None)
                assert proc.stdout is not None
                answerers.append((proc, BufferedByteReceiveStream(proc.stdout)))
            for _, out in answerers:
                assert await out.receive_until(b"\n", 100) == b"ready"
            go.touch()  # both answer now
            said = [orjson.loads(await out.receive_until(b"\n", 1000)) for _, out in answerers]
            for proc, _ in answerers:
                assert await proc.wait() == 0
                await proc.aclose()
            task = await engine.wait(task_id)
            # A third answer, through the API, is told who answered first.
            with pytest.raises(AlreadyAnsweredError, match="already answered"):
                await engine.approve(approval_id)
        engine.stop()
    assert sorted(s["won"] for s in said) == [False, True]
    winner = next(s for s in said if s["won"])
    assert all((s["decision"], s["by"]) == (winner["decision"], winner["by"]) for s in said)
    events = await all_events(engine, task_id)
    assert tool_status(events) == ("success" if winner["decision"] == "approved" else "denied")
    assert task.status == "done"
    states = [e.data["status"] for e in events if e.kind == "state"]
    assert states == ["queued", "running", "waiting_approval", "running", "done"]
    [answered] = await engine.approvals(task_id, status=None)
    assert answered.status == "answered" and answered.answered_by == winner["by"]


async def test_a_timeout_denies_and_a_cancelled_run_withdraws_its_request(
    url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    async with engine_on(url) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        timed = await submit(engine, "tool", tmp_path, run_options={"approval_timeout": 0.4})
        cancelled = await submit(engine, "tool", tmp_path)
        with anyio.fail_after(30):
            timed_task = await engine.wait(timed)
            asked = await waiting_for_approval(engine, cancelled)
            await engine.cancel(cancelled)
            cancelled_task = await engine.wait(cancelled)
            with pytest.raises(AlreadyAnsweredError, match="withdrawn"):
                await engine.deny(asked.data["approval_id"])
        engine.stop()
    [expired] = await engine.approvals(timed, status=None)
    assert (expired.status, expired.decision, expired.answered_by) == (
        "answered",
        "timed_out",
        "engine (timeout)",
    )
    assert tool_status(await all_events(engine, timed)) in ("timed_out", "denied")
    assert timed_task.status in ("done", "failed")
    [withdrawn] = await engine.approvals(cancelled, status=None)
    assert withdrawn.status == "withdrawn" and cancelled_task.status == "cancelled"


def test_many_answers_at_once_one_wins(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(db) as store:
        store.submit(TaskSpec(prompt="p", executor="claude-code", cwd=tmp_path))
        claimed = store.claim("w", Limits(), 30)
        assert claimed is not None
        approval = store.open_approval(claimed[1].id, {"tool_name": "Bash"})
        results: list[bool] = []
        barrier = threading.Barrier(8)

        def answer(i: int) -> None:
            with Store.open(db) as mine:
                barrier.wait(5)
                results.append(
                    mine.answer_approval(approval.id, "approved" if i % 2 else "denied", by=str(i))[0]
                )

        threads = [threading.Thread(target=answer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert sorted(results) == [False] * 7 + [True]
        assert store.get(claimed[0].id).status == "running"  # back from waiting_approval
