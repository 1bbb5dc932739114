"""The hostile fake agent (fixtures/bin/fake_hostile.py) as an executor of each protocol, and a
way to run it in a fresh interpreter whose peak memory is measured, not assumed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from orchestrate.executors.acp import AcpExecutor
from orchestrate.executors.base import Executor, ExecutorOptions
from orchestrate.executors.claude_code import ClaudeCodeExecutor
from orchestrate.executors.codex import CodexExecutor

from .helpers import FIXTURES, ROOT

FAKE_HOSTILE = FIXTURES / "bin" / "fake_hostile.py"
PROTOCOLS = {"claude": ClaudeCodeExecutor, "acp": AcpExecutor, "codex": CodexExecutor}


def hostile(protocol: str, **options: Any) -> Executor:
    """An executor of ``protocol`` whose agent is the hostile fake."""
    base = [sys.executable, str(FAKE_HOSTILE), "--protocol", protocol]
    return PROTOCOLS[protocol](ExecutorOptions(base_command=base, **options))


# Runs in a child interpreter: one run of the hostile agent, then its peak RSS growth (VmHWM, which
# the kernel keeps for us) and what the run produced, as JSON on stdout.
_CHILD = r"""
import json, sys, time, tempfile, pathlib
import anyio
from orchestrate import Run, Task
from orchestrate.entries import EntryPatch
from orchestrate.approvals.simple import AutoApprove
from orchestrate.process.pipes import ShutdownPolicy
from tests.hostile import hostile

def peak_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1])

async def main(args):
    cwd = pathlib.Path(tempfile.mkdtemp())
    executor = hostile(args["protocol"])
    if args.get("max_line_bytes"):
        make = executor.create_normalizer
        def limited():
            n = make()
            n.__init__(max_line_bytes=args["max_line_bytes"])
            return n
        executor.create_normalizer = limited
    task = Task(prompt=args["prompt"], cwd=cwd, raw_log=cwd / "raw.jsonl", timeout=args.get("timeout"))
    base = peak_kb()
    started = time.monotonic()
    approvals = AutoApprove() if args.get("approve") else None
    run = Run(executor, task, approvals, shutdown=ShutdownPolicy(0.2, 0.2, 0.5))
    patches = []
    async with run:
        if args.get("read_live"):
            patches = [p async for p in run.patches()]
        result = await run.wait()
        if not args.get("read_live"):  # a reader that read nothing while the agent wrote
            patches = [p async for p in run.patches()]
    seconds = time.monotonic() - started
    applied = []
    for p in patches:
        if p.op == "add":
            assert p.index == len(applied), "an add out of order"
            applied.append(p.entry)
        else:
            applied[p.index] = p.entry
    print(json.dumps({
        "grew_mb": (peak_kb() - base) / 1024,
        "seconds": seconds,
        "outcome": result.outcome,
        "entries": len(result.entries),
        "patches": len(patches),
        "patches_rebuild_entries": applied == result.entries,
        "texts": [e.content[:80] for e in result.entries if e.type.kind == "assistant_message"],
        "errors": [e.type.error.code for e in result.entries if e.type.kind == "error"],
    }))

anyio.run(main, json.loads(sys.argv[1]))
"""


def measured_run(protocol: str, prompt: str, *, limit: float = 30, **args: Any) -> dict[str, Any]:
    """One run in a child interpreter: its peak memory growth in MB and what it produced."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    spec = json.dumps({"protocol": protocol, "prompt": prompt, **args})
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, spec], capture_output=True, env=env, timeout=limit, check=False
    )
    assert child.returncode == 0, child.stderr.decode()[-3000:]
    return json.loads(child.stdout.decode().strip().splitlines()[-1])  # type: ignore[no-any-return]
