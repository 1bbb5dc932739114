"""Attacks on run/patch_queue.py's wake-up (a put wakes the reader only when one is asleep)."""

from __future__ import annotations

import random

import anyio
import anyio.lowlevel
import pytest

from orchestrate.entries import AssistantMessage, EntryPatch, NormalizedEntry
from orchestrate.run.patch_queue import PatchQueue

pytestmark = pytest.mark.anyio


def _patch(index: int, content: str) -> EntryPatch:
    entry = NormalizedEntry(index=index, type=AssistantMessage(), content=content)
    return EntryPatch.model_construct(op="add", index=index, entry=entry)


async def test_two_readers_asleep_both_wake_and_both_see_the_end() -> None:
    # Run.patches() may be iterated by two tasks at once (a second iteration continues where the
    # other is).  A reader that fell asleep first must not wait on an event nobody sets any more.
    queue = PatchQueue()
    got: list[int] = []
    ended: list[str] = []

    async def reader(name: str) -> None:
        while (patch := await queue.get()) is not None:
            got.append(patch.index)
            await anyio.lowlevel.checkpoint()
        ended.append(name)

    with anyio.fail_after(3):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader, "a")
            await anyio.sleep(0.01)  # a asleep
            tg.start_soon(reader, "b")
            await anyio.sleep(0.01)  # b asleep too
            for index in range(10):
                queue.put(_patch(index, "x"))
                await anyio.sleep(0.005)
            queue.close()
    assert sorted(got) == list(range(10))
    assert sorted(ended) == ["a", "b"]


async def test_no_patch_is_lost_under_random_interleaving_and_cancelled_reads() -> None:
    rng = random.Random(18)
    queue = PatchQueue()
    seen: set[int] = set()

    async def producer() -> None:
        for index in range(300):
            queue.put(_patch(index, "x"))
            if rng.random() < 0.5:
                await anyio.lowlevel.checkpoint()
            if rng.random() < 0.05:
                await anyio.sleep(0.001)
        queue.close()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            while True:
                if rng.random() < 0.2:  # a read given up while asleep: the next must still wake
                    with anyio.move_on_after(0):
                        patch = await queue.get()
                        if patch is None:
                            break
                        seen.add(patch.index)
                    continue
                patch = await queue.get()
                if patch is None:
                    break
                seen.add(patch.index)
    assert seen == set(range(300))
