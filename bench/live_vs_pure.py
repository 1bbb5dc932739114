"""A live run against the pure normalizer on the same bytes.

A fake Claude CLI (a few lines of Python, below) prints a synthetic stream-json session (a streamed
answer of ``--answer-mb`` and ``--tools`` tool calls, then one result) as fast as the pipe takes
it; ``orchestrate.Run`` drives it, writes the raw log and hands every patch to a consumer that
counts them.  The pure side feeds the chunks recorded in that raw log, in memory, to a fresh
normalizer.  Both are this process's CPU time (the fake agent's own time is not counted).

    python bench/live_vs_pure.py [--answer-mb 1] [--tools 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import Segment, normalize
from synthetic import stream

from orchestrate import AutoApprove, ExecutorOptions, Run, Task, get_executor
from orchestrate.process.rawlog import read_raw_log

FAKE = """
import sys
data = open(sys.argv[1], "rb").read()
out = sys.stdout.buffer
for i in range(0, len(data), 65536):
    out.write(data[i : i + 65536])
out.flush()
sys.stdin.buffer.read()  # until the client closes our input
"""


async def live(script: Path, capture: Path, log: Path) -> tuple[float, int]:
    options = ExecutorOptions(base_command=[sys.executable, str(script), str(capture)])
    task = Task(prompt="go", cwd=capture.parent, raw_log=log)
    patches = 0
    start = time.process_time()
    async with Run(get_executor("claude-code", options), task, approvals=AutoApprove()) as run:
        async for _ in run.patches():
            patches += 1
        result = await run.wait()
    assert result.outcome == "success", result
    return time.process_time() - start, patches


def pure(log: Path) -> tuple[float, int]:
    pieces = []
    for rec in read_raw_log(log)[1]:
        pieces.append(Segment(rec.stream, rec.data) if rec.stream else Segment(None, event=rec.event))
    start = time.process_time()
    patches = normalize("claude-stream-json", pieces)
    return time.process_time() - start, patches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answer-mb", type=float, default=1.0)
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        capture, script, log = Path(tmp) / "capture.jsonl", Path(tmp) / "fake.py", Path(tmp) / "raw.jsonl"
        segments = stream("claude-stream-json", answer_bytes=int(args.answer_mb * 1e6), tools=args.tools)
        capture.write_bytes(b"".join(s.data for s in segments))
        script.write_text(FAKE)
        best_live = best_pure = float("inf")
        for _ in range(args.repeat):
            seconds, live_patches = anyio.run(live, script, capture, log)
            best_live = min(best_live, seconds)
            seconds, pure_patches = pure(log)
            best_pure = min(best_pure, seconds)
        size = capture.stat().st_size / 1e6
        print(f"stream: {size:.1f} MB of Claude stream-json through a fake CLI")
        print(f"live run (CPU of this process): {best_live:6.3f} s, {live_patches} patches")
        print(f"pure normalizer, same chunks:   {best_pure:6.3f} s, {pure_patches} patches")
        print(f"live / pure:                    {best_live / best_pure:6.2f}x")


if __name__ == "__main__":
    main()
