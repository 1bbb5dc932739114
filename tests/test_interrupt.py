"""`orchestrate interrupt TASK` with the embedded engine: sent from another process, it reaches the
worker running the turn, which interrupts the agent its own way; the turn ends interrupted, the task
does not (a message sent meanwhile is its next turn, in the same session).  The Temporal backend's
test is in test_temporal_turns.py."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from orchestrate.engine import Engine

from .helpers import FAKE_CLAUDE, ROOT, group_members

pytestmark = pytest.mark.anyio

# The slow turn streams a word every 0.1 s for a minute: an interrupt that never arrived fails the test's
# bounded wait, and a loaded machine's interpreter start cannot outlast the turn.
FAKE = {"base_command": [sys.executable, str(FAKE_CLAUDE)], "env": {"FAKE_SLOW_WORDS": "600"}}


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrate", *args, "--store", url],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


async def until(check: Callable[[], Awaitable[bool]], within: float = 20) -> None:
    with anyio.fail_after(within):
        for _ in itertools.count():
            if await check():
                return
            await anyio.sleep(0.05)


async def started(engine: Engine, task_id: int, needle: str) -> None:
    with anyio.fail_after(20):
        async for event in engine.subscribe(task_id):
            if needle in str(event.data):
                return


async def test_an_interrupt_from_another_process_ends_the_turn_and_the_next_turn_follows(
    url: str, tmp_path: Path
) -> None:
    async with Engine.open(url, lease=0.6, poll=0.05) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task = await engine.submit("slow", "claude-code", executor_options=FAKE, cwd=tmp_path)
        await started(engine, task.id, "w2")
        # Interrupt and steer: the message is sent first, then the turn interrupted (one process).
        asked = await anyio.to_thread.run_sync(cli, url, "interrupt", str(task.id), "plain afterwards")
        assert asked.returncode == 0 and "interrupt requested" in asked.stdout, asked.stderr

        async def both_turns_over() -> bool:
            now = await engine.get(task.id)
            return now.attempts >= 2 and now.finished

        await until(both_turns_over)
        engine.stop()
    now = await engine.get(task.id)
    first, turn = await engine.runs(task.id)
    assert (first.status, first.outcome) == ("interrupted", "interrupted")
    assert first.pid and group_members(first.pid) == []  # the agent is gone, not left running
    assert (turn.kind, turn.status, turn.resume_token) == ("follow_up", "done", first.session_id)
    assert now.status == "done" and not now.interrupt_requested and not now.cancel_requested
    said = [str(e.data) async for e in engine.subscribe(task.id, follow=False)]
    assert not any("w599" in s for s in said) and any("resumed: plain afterwards" in s for s in said)


async def test_an_interrupt_while_an_approval_waits_withdraws_it_and_the_task_rests(
    url: str, tmp_path: Path
) -> None:
    async with Engine.open(url, lease=0.6, poll=0.05) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task = await engine.submit("tool", "claude-code", executor_options=FAKE, cwd=tmp_path)

        async def asking() -> bool:
            return bool(await engine.approvals(task.id))

        await until(asking)
        asked = await anyio.to_thread.run_sync(cli, url, "interrupt", str(task.id))
        assert asked.returncode == 0, asked.stderr
        with anyio.fail_after(20):
            done = await engine.wait(task.id)
        engine.stop()
    [run] = await engine.runs(task.id)
    assert (
        run.status == "interrupted" and done.status == "done" and "interrupted by request" in str(done.reason)
    )
    assert [a.status for a in await engine.approvals(task.id, status=None)] == ["withdrawn"]
    # Nothing runs now: a second interrupt is refused, clearly, and changes nothing.
    late = await anyio.to_thread.run_sync(cli, url, "interrupt", str(task.id))
    assert late.returncode != 0 and "only a running turn" in late.stderr
