"""A live run against the pure normalizer on the same bytes.

A fake Claude CLI (a few lines of Python, below) prints a synthetic stream-json session (a streamed
answer of ``--answer-mb`` and ``--tools`` tool calls, then one result) as fast as the pipe takes
it; ``orchestrate.Run`` drives it, writes the raw log and hands every patch to a consumer that
counts them.  The pure side feeds the chunks recorded in that raw log, in memory, to a fresh
normalizer.  Both are this process's CPU time (the fake agent's own time is not counted).

With ``--agent acp`` the agent is a JSON-RPC one instead: the hostile fake of the tests
(fixtures/bin/fake_hostile.py) speaking ACP, streaming an answer of ``--deltas`` text deltas of
``--size`` bytes, each a ``session/update`` notification (every line of which the driver's peer
reads, as ACP's driver does).

    python bench/live_vs_pure.py [--answer-mb 1] [--tools 10000] [--repeat 3]
    python bench/live_vs_pure.py --agent acp [--deltas 100000] [--size 20] [--repeat 3]
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

from orchestrate import AutoApprove, Executor, ExecutorOptions, Run, Task, get_executor
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


HOSTILE = Path(__file__).resolve().parent.parent / "fixtures" / "bin" / "fake_hostile.py"


async def live(executor: Executor, prompt: str, cwd: Path, log: Path) -> tuple[float, int]:
    task = Task(prompt=prompt, cwd=cwd, raw_log=log)
    patches = 0
    start = time.process_time()
    async with Run(executor, task, approvals=AutoApprove()) as run:
        async for _ in run.patches():
            patches += 1
        result = await run.wait()
    assert result.outcome == "success", result
    return time.process_time() - start, patches


def pure(log: Path, protocol: str) -> tuple[float, int]:
    pieces = []
    for rec in read_raw_log(log)[1]:
        pieces.append(Segment(rec.stream, rec.data) if rec.stream else Segment(None, event=rec.event))
    start = time.process_time()
    patches = normalize(protocol, pieces)
    return time.process_time() - start, patches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answer-mb", type=float, default=1.0)
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--agent", choices=["claude", "acp"], default="claude")
    parser.add_argument("--deltas", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        capture, script, log = Path(tmp) / "capture.jsonl", Path(tmp) / "fake.py", Path(tmp) / "raw.jsonl"
        if args.agent == "claude":
            segments = stream("claude-stream-json", answer_bytes=int(args.answer_mb * 1e6), tools=args.tools)
            capture.write_bytes(b"".join(s.data for s in segments))
            script.write_text(FAKE)
            options = ExecutorOptions(base_command=[sys.executable, str(script), str(capture)])
            executor, prompt, protocol = get_executor("claude-code", options), "go", "claude-stream-json"
        else:
            options = ExecutorOptions(base_command=[sys.executable, str(HOSTILE), "--protocol", "acp"])
            executor, protocol = get_executor("gemini", options), "acp-gemini"
            prompt = f"deltas={args.deltas} size={args.size}"
        best_live = best_pure = float("inf")
        for _ in range(args.repeat):
            seconds, live_patches = anyio.run(live, executor, prompt, Path(tmp), log)
            best_live = min(best_live, seconds)
            seconds, pure_patches = pure(log, protocol)
            best_pure = min(best_pure, seconds)
        size = sum(len(r.data) for r in read_raw_log(log)[1] if r.stream == "stdout") / 1e6
        what = "Claude stream-json" if args.agent == "claude" else "ACP (JSON-RPC) notifications"
        print(f"stream: {size:.1f} MB of {what} through a fake CLI")
        print(f"live run (CPU of this process): {best_live:6.3f} s, {live_patches} patches")
        print(f"pure normalizer, same chunks:   {best_pure:6.3f} s, {pure_patches} patches")
        print(f"live / pure:                    {best_live / best_pure:6.2f}x")


if __name__ == "__main__":
    main()
