"""run/patch_queue.py's bound: with a limit, the producer waits while that many patches wait unread,
and never waits for a reader that has stopped reading, nor after the queue is closed."""

from __future__ import annotations

import anyio
import pytest

from orchestrate.entries import AssistantMessage, EntryPatch, NormalizedEntry
from orchestrate.run.patch_queue import PatchQueue

pytestmark = pytest.mark.anyio


def _patch(index: int) -> EntryPatch:
    entry = NormalizedEntry(index=index, type=AssistantMessage(), content="x")
    return EntryPatch.model_construct(op="add", index=index, entry=entry)


async def test_the_producer_waits_while_the_limit_waits_unread_and_nothing_is_lost() -> None:
    queue = PatchQueue()
    queue.bound(10)
    most = 0
    got: list[int] = []

    async def produce() -> None:
        nonlocal most
        for start in range(0, 500, 5):  # five new entries a "chunk", then the wait for room
            for index in range(start, start + 5):
                queue.put(_patch(index))
            most = max(most, len(queue))
            await queue.room(stall=10)
        queue.close()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            while (patch := await queue.get()) is not None:
                got.append(patch.index)
                await anyio.sleep(0.0001)  # a reader slower than the producer
    assert got == list(range(500))
    assert most <= 10 - 1 + 5  # it waited at the limit, and went on at half of it


async def test_a_reader_that_stops_reading_holds_the_producer_back_once_then_never() -> None:
    queue = PatchQueue()
    queue.bound(4)
    for index in range(4):
        queue.put(_patch(index))
    with anyio.fail_after(5):
        await queue.room(stall=0.05)  # nothing read: it stops waiting
        for index in range(4, 100):
            queue.put(_patch(index))
            await queue.room(stall=60)  # and never waits again (else this would outlast fail_after)
    assert len(queue) == 100


async def test_closing_or_releasing_the_queue_lets_a_waiting_producer_go_on() -> None:
    for end in ("close", "release"):
        queue = PatchQueue()
        queue.bound(2)
        queue.put(_patch(0))
        queue.put(_patch(1))
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(queue.room, 60)
                await anyio.sleep(0.01)
                getattr(queue, end)()
        assert len(queue) == 2
