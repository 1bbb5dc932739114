"""The workflow of one task: ask for a turn, run it where the workspace is, again while the store queues
the task again (a retry, a follow-up), until the task ends.

Deterministic by Temporal's rules: no I/O, no clock but the workflow's, nothing imported from the store
or the engine.  The store stays the authority on the task (its queue position, dependencies, limits,
attempts, follow-up messages, cancel requests); the workflow is what makes each turn durable: if the
worker running it dies, Temporal notices the missing heartbeats and gives the turn to another worker on
the same task queue, which resumes the agent's session.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from .shapes import CANCEL, ENDED, TURN, WAKE, WORKFLOW, TaskInput, TurnInput, TurnResult

__all__ = ["TaskWorkflow"]

# Past this many events the workflow starts afresh (continue-as-new): a task that waits long in the queue
# asks many times, and a history is replayed whole whenever a worker picks the workflow up.
_HISTORY_LIMIT = 5000


@workflow.defn(name=WORKFLOW)
class TaskWorkflow:
    def __init__(self) -> None:
        self._woken = False

    @workflow.signal(name=WAKE)
    def wake(self) -> None:
        """Ask again now: the task may have been queued again, or what it waited for has ended."""
        self._woken = True

    @workflow.run
    async def run(self, task: TaskInput) -> TurnResult:
        delay = task.wait_min
        try:
            while True:
                self._woken = False
                result: TurnResult = await workflow.execute_activity(
                    TURN,
                    TurnInput(task.task_id),
                    result_type=TurnResult,
                    task_queue=task.queue,
                    start_to_close_timeout=timedelta(seconds=task.turn_timeout),
                    heartbeat_timeout=timedelta(seconds=task.heartbeat_timeout),
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(seconds=0.2),
                        maximum_interval=timedelta(seconds=5),
                        maximum_attempts=task.turn_retries,
                    ),
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
                if result.status in ENDED and not self._woken:
                    return result
                if workflow.cancellation_reason() is not None:
                    # Cancelled while a short turn ran (which then ended normally, the cancel absorbed).
                    raise asyncio.CancelledError
                if result.state == "waiting":
                    # Timing out is the normal way out of this wait (a wake signal being the other).
                    with contextlib.suppress(asyncio.TimeoutError):
                        await workflow.wait_condition(lambda: self._woken, timeout=timedelta(seconds=delay))
                    delay = min(delay * 2, task.wait_max)
                else:
                    delay = task.wait_min  # queued again (a retry or a follow-up): the next turn
                if workflow.info().get_current_history_length() > _HISTORY_LIMIT:
                    workflow.continue_as_new(task)
        except (asyncio.CancelledError, ActivityError) as exc:
            # Cancelled through Temporal (not `orchestrate cancel`): the store must say so too, or the
            # task would stay queued and be started again.  A cancel that comes while the turn's
            # activity is scheduled but not started reaches us as that activity's error (its cause
            # cancelled), not as our own CancelledError: the same end (the SDK would otherwise
            # close the workflow as cancelled and the store would never hear of it).
            if isinstance(exc, ActivityError) and not (
                is_cancelled_exception(exc) and workflow.cancellation_reason() is not None
            ):
                raise
            await workflow.execute_activity(
                CANCEL,
                task.task_id,
                task_queue=task.queue,
                start_to_close_timeout=timedelta(seconds=60),
            )
            raise
