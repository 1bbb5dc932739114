"""Delivery latency: how long after a fake Claude CLI writes a text delta the consumer of the run
holds a patch with it, for 1 and for 50 runs at once in one event loop.

Each fake CLI starts, waits until every one has started, then writes ``--deltas`` deltas, one
every ``--interval`` seconds, each carrying the wall-clock time it was written; the consumer reads
the newest time in each patch it receives.  Reports p50 / p99 / max over every delivered delta of
every run.  The baseline is the same
measure with a consumer that reads the fake CLI's stdout directly (no orchestrate in between).

    python bench/latency.py [--runs 1,50] [--deltas 100] [--interval 0.01]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from orchestrate import AutoApprove, ExecutorOptions, Run, Task, get_executor

FAKE = """
import json, sys, time
deltas, interval, start_at = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
sid = "00000000-0000-4000-8000-000000000001"
def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\\n")
    sys.stdout.flush()
ev = {"type": "stream_event", "session_id": sid, "parent_tool_use_id": None}
emit({"type": "system", "subtype": "init", "session_id": sid, "model": "m"})
emit({**ev, "event": {"type": "message_start", "message": {"id": "msg_1"}}})
emit({**ev, "event": {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}})
time.sleep(max(0.0, start_at - time.time()))  # every run started: measure delivery, not startup
for _ in range(deltas):
    time.sleep(interval)
    d = {"type": "text_delta", "text": f"t={time.time():.6f};"}
    emit({**ev, "event": {"type": "content_block_delta", "index": 0, "delta": d}})
emit({**ev, "event": {"type": "content_block_stop", "index": 0}})
emit({"type": "result", "subtype": "success", "is_error": False, "session_id": sid, "usage": {}})
sys.stdin.read()
"""
_STAMP = re.compile(r"t=(\d+\.\d+);$")


def fake_argv(script: Path, args: argparse.Namespace, start_at: float) -> list[str]:
    return [sys.executable, str(script), str(args.deltas), str(args.interval), str(start_at)]


async def one_run(
    script: Path, args: argparse.Namespace, cwd: Path, start_at: float, delays: list[float]
) -> None:
    argv = fake_argv(script, args, start_at)
    task = Task(prompt="go", cwd=cwd, raw_log=cwd / f"raw-{id(delays)}-{time.monotonic_ns()}.jsonl")
    executor = get_executor("claude-code", ExecutorOptions(base_command=argv))
    async with Run(executor, task, approvals=AutoApprove()) as run:
        async for patch in run.patches():
            m = _STAMP.search(patch.entry.content)
            if m:
                delays.append(time.time() - float(m.group(1)))
        await run.wait()


async def one_direct(script: Path, args: argparse.Namespace, start_at: float, delays: list[float]) -> None:
    argv = fake_argv(script, args, start_at)
    async with await anyio.open_process(argv) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        await proc.stdin.aclose()
        buf = b""
        async for chunk in proc.stdout:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                m = re.search(rb"t=(\d+\.\d+);", line)
                if m:
                    delays.append(time.time() - float(m.group(1)))


def summary(delays: list[float]) -> str:
    ms = sorted(d * 1e3 for d in delays)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"p50 {statistics.median(ms):6.2f} ms  p99 {p99:6.2f} ms  max {ms[-1]:6.2f} ms  ({len(ms)} deltas)"


async def measure(runs: int, script: Path, args: argparse.Namespace, cwd: Path) -> None:
    direct: list[float] = []
    live: list[float] = []
    # The deltas start once every fake CLI has had time to start (0.1 s each on a busy machine).
    async with anyio.create_task_group() as tg:
        start_at = time.time() + 0.5 + 0.1 * runs
        for _ in range(runs):
            tg.start_soon(one_direct, script, args, start_at, direct)
    async with anyio.create_task_group() as tg:
        start_at = time.time() + 0.5 + 0.1 * runs
        for _ in range(runs):
            tg.start_soon(one_run, script, args, cwd, start_at, live)
    print(f"{runs:3d} run(s)  reading the pipe:  {summary(direct)}")
    print(f"{runs:3d} run(s)  through Run:       {summary(live)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="1,50")
    parser.add_argument("--deltas", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.01)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "fake_claude.py"
        script.write_text(FAKE)
        for runs in (int(x) for x in args.runs.split(",")):
            anyio.run(measure, runs, script, args, Path(tmp))


if __name__ == "__main__":
    main()
