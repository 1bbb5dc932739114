"""Bounded everywhere, with backpressure: each bound held against a real hostile agent process, with
the peak memory of the run measured in a fresh interpreter (VmHWM), never assumed.

Figures measured before the bounds (each test says its own): a reader that read nothing while the
agent streamed 200 deltas of 32 KB grew by 342 MB (one held copy of the answer per chunk read); a
100 MB flood from an agent that stopped reading its stdin grew by 110 to 204 MB; a 40 MB line grew
by 125 MB; 5000 pending requests of 4 KB by 40 MB; 8000 pending permission requests took 25 s (9x
the time of 2000).
"""

from __future__ import annotations

import gc
import time
from datetime import datetime
from typing import Any

import anyio
import orjson
import pytest

from orchestrate.entries import AssistantMessage, EntryPatch, NormalizedEntry
from orchestrate.normalizers.acp import AcpNormalizer
from orchestrate.normalizers.base import MAX_PROTOCOL_ERRORS
from orchestrate.run.patch_queue import PatchQueue

from .hostile import measured_run

# --- entry patches for a slow reader --------------------------------------------------------------


def _patch(op: str, index: int, content: str) -> EntryPatch:
    entry = NormalizedEntry(index=index, type=AssistantMessage(), content=content)
    return EntryPatch.model_construct(op=op, index=index, entry=entry)


async def _drain(queue: PatchQueue) -> list[tuple[str, int, str]]:
    queue.close()
    out = []
    while (patch := await queue.get()) is not None:
        out.append((patch.op, patch.index, patch.entry.content))
    return out


@pytest.mark.anyio
async def test_waiting_patches_fold_into_the_latest_state_of_each_entry() -> None:
    queue = PatchQueue()
    queue.put(_patch("add", 0, "a"))
    queue.put(_patch("replace", 0, "ab"))  # not read yet: still an add, with the newer entry
    queue.put(_patch("add", 1, "x"))
    first = await queue.get()
    assert first is not None and (first.op, first.index, first.entry.content) == ("add", 0, "ab")
    for n in range(1000):  # a thousand deltas while nobody reads: one patch waits
        queue.put(_patch("replace", 0, "ab" + "c" * n))
    queue.put(_patch("replace", 1, "xy"))
    assert len(queue) == 2
    # order of first touch since the last read: entry 1 (added) before entry 0 (touched again after)
    assert await _drain(queue) == [("add", 1, "xy"), ("replace", 0, "ab" + "c" * 999)]


@pytest.mark.anyio
async def test_a_reader_waits_for_patches_and_sees_the_end() -> None:
    queue = PatchQueue()
    got: list[int] = []

    async def reader() -> None:
        while (patch := await queue.get()) is not None:
            got.append(patch.index)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await anyio.sleep(0.01)
            queue.put(_patch("add", 0, "a"))
            await anyio.sleep(0.01)
            queue.put(_patch("add", 1, "b"))
            queue.close()
    assert got == [0, 1]


def test_a_reader_that_reads_nothing_costs_entries_not_deltas() -> None:
    """120 deltas of 32 KB (a 3.75 MB answer), nothing read until the run is over: the memory is a
    few copies of the answer, not one per chunk the run read."""
    run = measured_run("claude", "deltas=120 size=32768")
    assert run["outcome"] == "success" and run["patches_rebuild_entries"]
    assert run["patches"] == 3  # init, the answer, usage: one patch per entry
    assert run["grew_mb"] < 12 + 5 * 3.75, run  # before: 342 MB for 200 deltas


def test_a_fast_agent_waits_for_us_when_we_cannot_read() -> None:
    """The agent stops reading its stdin, so our answers to its requests stall the read loop; then
    it floods 100 MB.  Only backpressure on its stdout keeps us flat: the run stalls until its
    time limit instead of buffering the flood."""
    run = measured_run("claude", "noread=100000000", timeout=1.0)
    assert run["outcome"] == "timed_out"
    assert run["grew_mb"] < 40, run  # before: 110 MB in 1.5 s, 204 MB in 4 s


def test_garbage_lines_cost_a_bounded_number_of_entries() -> None:
    """200k lines that are not JSON: a thousand shown, one entry counting the rest (each line was
    an entry before: a million took 3.1 GB)."""
    run = measured_run("acp", "garbage=200000")
    assert run["outcome"] == "success" and run["texts"] == ["after the garbage"]
    assert run["errors"].count("protocol_error") == MAX_PROTOCOL_ERRORS + 1  # the last one counts
    assert run["entries"] < MAX_PROTOCOL_ERRORS + 10
    assert run["grew_mb"] < 25, run


def test_a_huge_line_is_dropped_as_it_streams() -> None:
    """A 40 MB line with a 1 MiB limit: reported, skipped, never held whole (by the normalizer's
    framer or the driver's, which shares its limit)."""
    run = measured_run("claude", "huge=40000000", max_line_bytes=1 << 20)
    assert run["outcome"] == "success" and run["texts"] == ["after the huge line"]
    assert run["errors"] == ["line_too_long"]
    assert run["grew_mb"] < 25, run


def test_pending_requests_are_bounded() -> None:
    """The agent sends 10000 requests of 4 KB before it reads one answer: at most MAX_SERVED are
    served at once, the rest wait in its pipe, not in our memory (before: 6 KB each and what they
    carry, 242 MB for 40k small ones).  What is held does not depend on how many were sent, so
    twice the requests of the first measurement (21 MB for 5000; 40 MB for 5000 with no bound)
    leaves a wide margin against a loaded machine's noise."""
    run = measured_run("acp", "requests=10000 pad=4096", limit=90)
    assert run["texts"] == ["10000 of 10000 requests answered"] and run["outcome"] == "success"
    assert run["grew_mb"] < 45, run  # with no bound: 71 MB measured


def test_stderr_is_kept_as_a_tail() -> None:
    run = measured_run("claude", "stderr=100000000")
    assert run["outcome"] == "success" and run["texts"] == ["after the stderr"]
    assert run["grew_mb"] < 25, run


def test_a_terminal_with_no_limit_keeps_a_bounded_tail() -> None:
    """ACP lets the agent leave a terminal's outputByteLimit out: we keep the last 1 MiB of its
    30 MB, and say it was truncated, instead of all of it."""
    run = measured_run("acp", "terminal=30000000", approve=True)
    assert run["texts"] == ["kept 1048576 bytes, truncated=True"], run
    assert run["grew_mb"] < 30, run


# --- linear in the number of requests -------------------------------------------------------------


def _permission_traffic(n: int) -> list[tuple[str, Any]]:
    """What a run sees when an agent asks ``n`` permissions at once: every request, then every
    approval note, then every answer."""
    out: list[tuple[str, Any]] = []
    for i in range(n):
        call = {"toolCallId": f"c{i}", "title": "t", "kind": "execute", "rawInput": {"command": "t"}}
        params = {"toolCall": call, "options": [{"optionId": "y", "kind": "allow_once"}]}
        out.append(
            ("stdout", {"jsonrpc": "2.0", "id": i, "method": "session/request_permission", "params": params})
        )
    out += [("note", {"type": "approval", "request_id": str(i), "decision": "approved"}) for i in range(n)]
    answer = {"outcome": {"outcome": "selected", "optionId": "y"}}
    out += [("stdin", {"jsonrpc": "2.0", "id": i, "result": answer}) for i in range(n)]
    return out


def _normalize(traffic: list[tuple[str, Any]]) -> float:
    n = AcpNormalizer()
    n.strict = True
    ts = datetime(2026, 1, 1)
    # This process's CPU (other work on the machine counts less), the cyclic collector paused: its
    # passes walk every object alive, which grows with the requests kept (bench/README.md,
    # Scaling), and this is about the normalizer's own work.
    gc.collect()
    gc.disable()
    try:
        started = time.process_time()
        for stream, message in traffic:
            if stream == "note":
                n.note(message, ts)
            else:
                n.feed(orjson.dumps(message) + b"\n", stream, ts)
        n.finish(ts)
        return time.process_time() - started
    finally:
        gc.enable()


def test_handling_requests_is_linear_in_their_number() -> None:
    """Ten times the pending permission requests take about ten times as long (the approval note
    once scanned every pending request: a hundred times)."""
    small, big = _permission_traffic(500), _permission_traffic(5000)
    _normalize(small)  # warm up
    # The best of three rounds each: a loaded CI machine (two test workers) once made one round of
    # the big side 27x the small one's; a quadratic handler is 100x.
    ratio = min(_normalize(big) for _ in range(3)) / min(_normalize(small) for _ in range(3))
    assert ratio < 25, ratio
