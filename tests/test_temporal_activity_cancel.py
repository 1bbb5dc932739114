"""Why Temporal cancelled a turn decides what the store says (engine/temporal/activities.py): a cancel
asked for (a client cancelling the workflow) cancels the task; a turn whose heartbeats stopped
reaching Temporal in time (a loaded machine, a stopped or sleeping worker: cancelled as timed out or
not found) is not the user's cancel, and is left for Temporal's retry, which takes the run over and
resumes it.  The turn runs in temporalio's ActivityEnvironment, against a real SQLite store and the
fake Claude; no Temporal server."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import anyio
import pytest

pytest.importorskip("temporalio")

from temporalio.activity import ActivityCancellationDetails
from temporalio.testing import ActivityEnvironment

from orchestrate.engine.procinfo import HOST
from orchestrate.engine.runner import RunSettings
from orchestrate.engine.temporal.activities import TurnActivities
from orchestrate.engine.temporal.shapes import TurnInput
from orchestrate.registry import default_registry
from orchestrate.store import EventWriter, Limits, Store, TaskSpec

from .helpers import group_members
from .test_engine import fake

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("details", "status"),
    [
        (ActivityCancellationDetails(cancel_requested=True), "cancelled"),
        (ActivityCancellationDetails(timed_out=True), "running"),
        (ActivityCancellationDetails(not_found=True), "running"),
        (ActivityCancellationDetails(paused=True), "running"),
    ],
)
async def test_a_timed_out_turn_is_left_for_the_retry_and_a_cancel_cancels(
    tmp_path: Path, details: ActivityCancellationDetails, status: str
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    writer = EventWriter(store).start()
    try:
        turns = TurnActivities(
            store,
            writer,
            RunSettings(registry=default_registry, approvals=None, log_dir=tmp_path),
            worker=f"{HOST}:{os.getpid()}:test",
            limits=Limits(),
            lease=30,
            beat=0.2,
        )
        options = fake() | {"env": {"FAKE_SLOW_WORDS": "600"}}
        spec = TaskSpec(prompt="slow", executor="claude-code", cwd=tmp_path, executor_options=options)
        task_id = store.submit(spec).id
        env = ActivityEnvironment()
        ended: list[BaseException] = []

        async def turn() -> None:
            try:
                await env.run(turns.turn, TurnInput(task_id))
            except BaseException as exc:  # the cancel, as Temporal's worker would see it
                ended.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            with anyio.fail_after(30):
                while not any(  # noqa: ASYNC110 - the store has no event to wait on
                    e.kind == "patch" and "w3" in str(e.data) for e in store.events(task_id=task_id)
                ):
                    await anyio.sleep(0.05)
            env.cancel(details)
        assert len(ended) == 1 and isinstance(ended[0], asyncio.CancelledError)
        [run] = store.runs(task_id)
        assert store.get(task_id).status == status, (run.status, run.error)
        if status == "running":
            assert run.status == "running"  # for the retry's take-over, which resumes its session
        assert run.pid and group_members(run.pid) == []  # the agent stopped either way
    finally:
        writer.close()
        store.close()
