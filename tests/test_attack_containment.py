"""Attacks on containment by a hostile agent that runs as our own user: it can signal its own
supervisor.  Real processes; every wait is bounded; each test checks /proc that nothing survives."""

from __future__ import annotations

import os
import secrets
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from orchestrate.process.env import build_env
from orchestrate.process.pipes import AgentProcess, ProcessSpec, ShutdownPolicy

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(sys.platform != "linux", reason="Linux containment")]

FAST = ShutdownPolicy(interrupt_grace=0.1, stdin_grace=0.2, term_grace=0.2)

# The agent: a grandchild that leaves the session (setsid), ignores SIGTERM and sleeps with a mark
# in its argv; then the agent stops its own supervisor (its parent) with SIGSTOP and exits or stays
# ("restop": a second escapee keeps stopping the supervisor, in a loop).
AGENT = r"""
import os, signal, sys, time
mark = sys.argv[1]
supervisor = os.getppid()
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(61)", mark])
if sys.argv[2] == "restop" and os.fork() == 0:
    # Another escapee stops the supervisor again and again, so waking it is not enough.
    os.setsid()
    loop = "import os, signal, sys\nwhile True:\n    os.kill(%d, signal.SIGSTOP)" % supervisor
    os.execv(sys.executable, [sys.executable, "-c", loop, mark])
time.sleep(0.3)
os.kill(supervisor, signal.SIGSTOP)
print("stopped", flush=True)
if sys.argv[2] == "exit":
    sys.exit(0)
os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(62)", mark])
"""


def marked(mark: str) -> list[int]:
    """Live (not zombie) processes whose argv holds ``mark``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


async def until(condition: Callable[[], bool], seconds: float, fail: bool = True) -> None:
    """Poll ``condition`` (the kernel posts no event for what /proc shows), at most ``seconds``."""
    with anyio.move_on_after(seconds):
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(0.02)
    assert condition() or not fail, "timed out"


def stopped(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "T"
    except OSError:
        return False


@pytest.mark.parametrize("then", ["exit", "stay", "restop"])
async def test_an_agent_that_stops_its_supervisor_still_dies_with_its_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    monkeypatch.setenv("ORCHESTRATE_CGROUPS", "0")  # the supervisor alone: what most machines have
    mark = secrets.token_hex(4)
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    proc = await AgentProcess.spawn(
        ProcessSpec([sys.executable, str(script), mark, then], tmp_path, build_env(os.environ))
    )
    supervisor = proc.process.pid
    wanted = {"exit": 1, "stay": 2, "restop": 3}[then]  # the agent, its escapees
    try:
        await until(lambda: stopped(supervisor) and len(marked(mark)) >= wanted, 10)
        with anyio.fail_after(20):
            await proc.shutdown(FAST)
        await until(lambda: not marked(mark), 5, fail=False)
        assert marked(mark) == [], "a process of the run outlived it"
        assert proc.returncode is not None, "the supervisor was left behind, stopped"
    finally:
        for pid in marked(mark):
            os.kill(pid, signal.SIGKILL)
        if proc.returncode is None:
            os.kill(supervisor, signal.SIGKILL)
