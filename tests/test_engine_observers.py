"""Observer hooks: run start and end, tool calls, approvals asked and answered; an observer that
raises never stops a run; state events alone for a board that only wants those."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrate.approvals import AutoApprove
from orchestrate.engine.observers import Observers

from .test_engine import engine_on, submit, url  # noqa: F401  (url: the shared fixture)

pytestmark = pytest.mark.anyio


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_run_start(self, task: Any, run: Any) -> None:
        self.calls.append(("start", task.id, run.id))

    def on_run_end(self, task: Any, run: Any, end: Any, task_status: str) -> None:
        self.calls.append(("end", task.id, end["outcome"], task_status))

    def on_tool_call(self, task: Any, run: Any, entry: Any) -> None:
        self.calls.append(("tool", entry.type.tool.status))

    def on_approval(self, task: Any, run: Any, entry: Any, phase: str) -> None:
        approval = entry.type.tool.approval
        self.calls.append(("approval", phase, approval.decision if approval else None))


class Broken:
    def on_run_start(self, task: Any, run: Any) -> None:
        raise RuntimeError("observer bug")

    def on_tool_call(self, task: Any, run: Any, entry: Any) -> None:
        raise RuntimeError("observer bug")


async def test_observers_see_runs_tool_calls_and_approvals(url: str, tmp_path: Path) -> None:  # noqa: F811
    seen = Recorder()
    observers = [Broken(), seen]
    async with (
        engine_on(url, observers=observers, approvals=AutoApprove()) as engine,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(engine.work)
        task_id = await submit(engine, "tool", tmp_path)
        with anyio.fail_after(20):
            states = [e.data["status"] async for e in engine.subscribe(task_id, kinds={"state"})]
        engine.stop()
        [run] = await engine.runs(task_id)
    assert states == ["queued", "running", "done"]
    assert seen.calls[0] == ("start", task_id, run.id) and seen.calls[-1] == (
        "end",
        task_id,
        "success",
        "done",
    )
    tools = [c[1] for c in seen.calls if c[0] == "tool"]
    assert tools[0] in ("created", "pending_approval") and tools[-1] == "success"
    assert "pending_approval" in tools and len(tools) == len(set(tools))  # each change once
    approvals = [c[1:] for c in seen.calls if c[0] == "approval"]
    assert approvals == [("asked", "pending"), ("answered", "approved")]


def test_unused_hooks_cost_nothing_per_entry() -> None:
    assert not Observers().per_entry
    only_runs = type("OnlyRuns", (), {"on_run_end": lambda *a: None})()
    assert not Observers([only_runs]).per_entry and Observers([only_runs]).run_end
    assert Observers([Recorder()]).per_entry
