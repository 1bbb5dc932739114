"""The engine's end-to-end tests again, on a real Postgres: real fake-agent processes, workers in this
process and in others, the store a fresh database per test.  The tests are imported from the engine's
test modules; the ``url`` fixture here gives them Postgres instead of a SQLite file."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from .services import Postgres
from .test_engine import (  # noqa: F401  (collected here again, on Postgres)
    engine_on,
    submit,
    test_a_chain_runs_in_order_and_a_failure_blocks_its_dependents,
    test_a_killed_worker_is_recovered_resumed_and_numbered_on,
    test_a_task_runs_and_everything_is_stored,
    test_cancel_from_another_process,
    test_per_executor_limit_holds_across_two_workers_under_load,
    test_subscribe_from_an_offset_and_reconnect_miss_nothing,
    worker,
)
from .test_engine_approvals import (  # noqa: F401
    test_a_timeout_denies_and_a_cancelled_run_withdraws_its_request,
    test_two_processes_answer_at_once_and_the_first_answer_wins,
)
from .test_engine_turns import (  # noqa: F401
    test_a_steering_worker_sends_a_follow_up_into_the_busy_agent_at_once_and_says_so,
    test_follow_ups_queued_while_busy_are_the_next_turn_in_the_same_session,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def url(postgres: Postgres) -> str:
    return postgres.database()


async def test_a_follower_is_woken_by_notify_not_by_polling(url: str, tmp_path: Path) -> None:
    """With a slow poll (2 s), a subscriber still sees each event within a fraction of it: NOTIFY from
    the worker's transactions wakes it."""
    async with engine_on(url, poll=2.0) as follower, engine_on(url, poll=0.05) as runner:
        task_id = await submit(runner, "slow", tmp_path)
        notifier = follower.store.notifier()
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner.work)
            gaps = []
            last = anyio.current_time()
            with anyio.fail_after(30):
                async for event in follower.subscribe(task_id):
                    now = anyio.current_time()
                    if event.kind == "patch":
                        gaps.append(now - last)
                    last = now
            runner.stop()
    assert notifier is not None and notifier.received > 0
    # The agent writes a word every 0.1 s; polled every 2 s, the typical gap would be ~0 or 2 s.
    gaps.sort()
    assert len(gaps) > 10 and gaps[len(gaps) // 2] < 0.5, gaps
