"""Follow-up turns: messages sent while the agent is busy wait for the turn to end and become the next
turn in the same session; a message for a finished task starts a follow-up run."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from orchestrate import ApprovalDecision, ApprovalRequest
from orchestrate.engine import Engine
from orchestrate.store import Event

from .helpers import FAKE_CURSOR
from .test_engine import all_events, engine_on, submit, url  # noqa: F401  (url: the shared fixture)

pytestmark = pytest.mark.anyio


class Gate:
    """Approves once the test opens the gate: the agent is busy (mid-turn) until then."""

    def __init__(self) -> None:
        self.asked = anyio.Event()
        self.open = anyio.Event()

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.set()
        await self.open.wait()
        return ApprovalDecision.approve()


def said(events: list[Event], run_id: int) -> list[str]:
    return [
        e.data["entry"]["content"]
        for e in events
        if e.run_id == run_id and e.kind == "patch" and e.data["entry"]["type"]["kind"] == "assistant_message"
    ]


async def test_follow_ups_queued_while_busy_are_the_next_turn_in_the_same_session(
    url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    gate = Gate()
    async with engine_on(url, approvals=gate) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task_id = await submit(engine, "tool", tmp_path)
        with anyio.fail_after(30):
            await gate.asked.wait()  # the agent is mid-turn, waiting for an approval
            busy = await engine.send(task_id, "plain one")
            await engine.send(task_id, "plain two")
            assert busy.status == "running"
            assert [m["delivered_run_id"] for m in engine.store.messages(task_id)] == [None, None]
            gate.open.set()
            task = await engine.wait(task_id)
            # A message for a task that has ended starts a follow-up run at once.
            again = await engine.send(task_id, "plain three")
            assert again.status == "queued" and again.follow_up
            task = await engine.wait(task_id)
        engine.stop()
        first, second, third = await engine.runs(task_id)
        events = await all_events(engine, task_id)
    assert task.status == "done" and task.error is None
    assert (first.kind, first.prompt, first.status) == ("attempt", None, "done")
    # Both waiting messages, in order, as one turn that resumes the first run's session.
    assert (second.kind, second.prompt, second.status) == ("follow_up", "plain one\n\nplain two", "done")
    assert second.resume_token == first.session_id == second.session_id
    assert said(events, second.id) == ["resumed: plain one\n\nplain two"]
    assert (third.kind, third.prompt, third.resume_token) == ("follow_up", "plain three", first.session_id)
    assert said(events, third.id) == ["resumed: plain three"]
    assert [m["delivered_run_id"] for m in engine.store.messages(task_id)] == [second.id, second.id, third.id]
    # Sent while busy: no new run started until the turn was over.
    assert second.started_at >= first.ended_at  # type: ignore[operator]
    states = [(e.data["status"], e.data.get("follow_up")) for e in events if e.kind == "state"]
    assert states == [
        ("queued", None),
        ("running", None),
        ("queued", True),
        ("running", None),
        ("done", None),
        ("queued", True),
        ("running", None),
        ("done", None),
    ]
    # Tokens and cost are summed over the task's three runs.
    assert task.input_tokens == 30 and task.cost_usd == pytest.approx(0.003)


async def test_a_message_for_a_queued_task_waits_for_its_first_turn_and_an_empty_one_is_refused(
    url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    async with Engine.open(url, poll=0.05) as engine:
        task_id = await submit(engine, "plain", tmp_path)
        with pytest.raises(Exception, match="needs some text"):
            await engine.send(task_id, "  ")
        queued = await engine.send(task_id, "plain later")  # not run yet: delivered after its first turn
        assert queued.status == "queued" and not queued.follow_up


async def test_a_steering_worker_sends_a_follow_up_into_the_busy_agent_at_once_and_says_so(
    url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    gate = Gate()
    async with engine_on(url, approvals=gate, steer=True) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task_id = await submit(engine, "tool", tmp_path)
        with anyio.fail_after(30):
            await gate.asked.wait()  # mid-turn, waiting for an approval
            # Stored by another client straight into the store: the worker finds it there.
            engine.store.send(task_id, "plain steered")
            while (await engine.messages(task_id))[0]["delivery"] is None:  # noqa: ASYNC110
                await anyio.sleep(0.02)
            gate.open.set()  # the turn goes on; the steered message is answered in the same run
            task = await engine.wait(task_id)
        engine.stop()
        [run] = await engine.runs(task_id)  # no follow-up run: it went into the live one
        events = await all_events(engine, task_id)
        [message] = await engine.messages(task_id)
    assert task.status == "done" and run.status == "done"
    assert (message["delivered_run_id"], message["delivery"]) == (run.id, "steered")
    [notice] = [e for e in events if e.kind == "notice"]
    assert notice.run_id == run.id and notice.data["delivery"] == "steered"
    assert notice.data["messages"] == [message["id"]]
    assert said(events, run.id)[-1] == "hello from fake claude"  # the steered turn's answer, same run
    assert task.input_tokens == 20  # two turns of one run, both counted


async def test_a_steering_worker_leaves_an_agent_that_cannot_take_messages_mid_turn_alone(
    url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    cursor = {"base_command": [sys.executable, str(FAKE_CURSOR)]}
    async with engine_on(url, steer=True) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task = await engine.submit("slow", "cursor", executor_options=cursor, cwd=tmp_path)
        with anyio.fail_after(30):
            async for event in engine.subscribe(task.id):
                if event.kind == "patch" and "w2" in str(event.data):
                    break
            await engine.send(task.id, "plain later")
            await anyio.sleep(0.5)  # several of the worker's polls
            [message] = await engine.messages(task.id)
            assert (message["delivered_run_id"], message["delivery"]) == (None, None)  # waits
            await engine.cancel(task.id)
            await engine.wait(task.id)
        engine.stop()
    assert not [e for e in await all_events(engine, task.id) if e.kind == "notice"]
