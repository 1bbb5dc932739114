"""Watchdogs per phase, each with its own error code: an agent that never starts talking, one that
falls silent, one that talks for too long; and waiting for an approval is not silence."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrate import ApprovalDecision, ApprovalRequest
from orchestrate.engine import Watchdogs

from .helpers import group_members
from .test_engine import engine_on, submit, url  # noqa: F401  (url: the shared fixture)

pytestmark = pytest.mark.anyio

MUTE = {"base_command": [sys.executable, "-c", "import time; time.sleep(60)"]}  # spawns, never writes


class ApproveAfter:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        await anyio.sleep(self.seconds)
        return ApprovalDecision.approve()


# Each case gives the other limits room, so a loaded machine's pauses (a fake agent scheduled late)
# cannot trip the wrong one: the limit under test is the only one that can fire first.
@pytest.mark.parametrize(
    ("prompt", "options", "dogs", "code"),
    [
        # no first output
        ("plain", MUTE, Watchdogs(startup=1.0, silence=10.0, total=10.0), "startup_timeout"),
        # says hello, then nothing (and ignores SIGTERM)
        ("hang", {}, Watchdogs(startup=10.0, silence=0.5, total=10.0), "silence_timeout"),
        # a word every 0.1 s, for 5 s
        ("slow", {}, Watchdogs(startup=10.0, silence=3.0, total=1.5), "run_timeout"),
    ],
)
async def test_each_phase_has_its_own_limit_and_code(
    url: str,  # noqa: F811
    tmp_path: Path,
    prompt: str,
    options: dict[str, Any],
    dogs: Watchdogs,
    code: str,
) -> None:
    async with engine_on(url, watchdogs=dogs) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        if options:
            task = await engine.submit(prompt, "claude-code", executor_options=options, cwd=tmp_path)
            task_id = task.id
        else:
            task_id = await submit(engine, prompt, tmp_path)
        with anyio.fail_after(15):
            task = await engine.wait(task_id)
        engine.stop()
        [run] = await engine.runs(task_id)
    assert (task.status, task.error_code, run.status, run.error_code) == ("failed", code, "failed", code)
    assert run.pid and group_members(run.pid) == []  # the agent (and the hang's child) are gone
    started, ended = run.started_at, run.ended_at
    assert started is not None and ended is not None
    assert ended - started < 6  # stopped by its watchdog, not by the agent ending


async def test_waiting_for_an_approval_is_not_silence(url: str, tmp_path: Path) -> None:  # noqa: F811
    dogs = Watchdogs(silence=0.4)
    async with (
        engine_on(url, watchdogs=dogs, approvals=ApproveAfter(1.2)) as engine,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(engine.work)
        task_id = await submit(engine, "tool", tmp_path)
        with anyio.fail_after(15):
            task = await engine.wait(task_id)
        engine.stop()
    assert (task.status, task.error_code) == ("done", None)
