"""Attacks on the agent's pipes as live18 left them: spawned with subprocess.Popen and read and
written straight from their fds (process/pipes.py), stdout enlarged under a per-process budget."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import pytest

from orchestrate.process import pipes
from orchestrate.process.pipes import STDOUT_PIPE_BYTES, AgentProcess, Chunk, ProcessSpec, ShutdownPolicy

pytestmark = pytest.mark.anyio

_FAST = ShutdownPolicy(interrupt_grace=0.2, stdin_grace=0.2, term_grace=0.5)


def _children() -> set[int]:
    found: set[int] = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as f:
            found.update(int(pid) for pid in f.read().split())
    return found


def _spec(tmp_path: Path, code: str) -> ProcessSpec:
    return ProcessSpec(argv=[sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ))


@pytest.mark.parametrize(("supervised", "count"), [("0", 200), ("1", 20)])
async def test_many_agents_leave_no_fd_no_zombie_and_no_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, supervised: str, count: int
) -> None:
    monkeypatch.setenv("ORCHESTRATE_SUPERVISOR", supervised)
    monkeypatch.setenv("ORCHESTRATE_CGROUPS", "0")
    spec = ProcessSpec(argv=["/bin/true"], cwd=tmp_path, env=dict(os.environ))
    fds, budget, children = len(os.listdir("/proc/self/fd")), pipes._enlarged[0], _children()
    with anyio.fail_after(60):
        for _ in range(count):
            agent = await AgentProcess.spawn(spec, STDOUT_PIPE_BYTES)
            send, receive = anyio.create_memory_object_stream[Chunk](4)
            async with anyio.create_task_group() as tg:
                tg.start_soon(agent.pump, send)
                async with receive:
                    async for _chunk in receive:
                        pass
            await agent.shutdown(_FAST)
    assert len(os.listdir("/proc/self/fd")) == fds
    assert pipes._enlarged[0] == budget
    assert _children() <= children  # every agent (and supervisor) reaped: no zombie left


async def test_an_agent_that_never_reads_stdin_does_not_block_the_loop(tmp_path: Path) -> None:
    # Writes far past the pipe's capacity to an agent that never reads: the write waits, the event
    # loop keeps turning, and the shutdown ends it all in bounded time.
    agent = await AgentProcess.spawn(_spec(tmp_path, "import time; time.sleep(30)"), STDOUT_PIPE_BYTES)
    ticks = 0
    try:

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await anyio.sleep(0.01)
                ticks += 1

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            with anyio.move_on_after(0.5):
                await agent.write(b"x" * (8 << 20))
            tg.cancel_scope.cancel()
        assert ticks >= 10
    finally:
        started = time.monotonic()
        await agent.shutdown(_FAST)
        assert time.monotonic() - started < 8
    assert agent.returncode is not None


async def test_an_agent_that_closes_its_output_and_keeps_running_dies_at_shutdown(tmp_path: Path) -> None:
    code = (
        "import os, time; os.close(1); os.close(2); open('%s', 'w').write(str(os.getpid())); time.sleep(30)"
    )
    marker = tmp_path / "pid"
    agent = await AgentProcess.spawn(_spec(tmp_path, code % marker), STDOUT_PIPE_BYTES)
    send, receive = anyio.create_memory_object_stream[Chunk](4)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.pump, send)
            async with receive:
                async for _chunk in receive:
                    pass
        assert agent.returncode is None  # its output ended, it did not
        await agent.shutdown(_FAST)
    pid = int(marker.read_text())
    assert agent.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_a_cancelled_pump_and_write_give_everything_back(tmp_path: Path) -> None:
    # A flood nobody reads past the chunk queue, cancelled mid-way: bounded, then closed whole.
    fds, budget = len(os.listdir("/proc/self/fd")), pipes._enlarged[0]
    code = "import sys\nwhile True: sys.stdout.buffer.write(b'y' * 65536)"
    agent = await AgentProcess.spawn(_spec(tmp_path, code), STDOUT_PIPE_BYTES)
    send, receive = anyio.create_memory_object_stream[Chunk](4)
    with anyio.move_on_after(0.5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.pump, send)
            tg.start_soon(agent.write, b"z" * (4 << 20))
    held = 0  # what waits in the queue: 4 reads at most
    while True:
        try:
            held += len(receive.receive_nowait().data)
        except (anyio.WouldBlock, anyio.EndOfStream):
            break
    assert held <= 4 * STDOUT_PIPE_BYTES
    receive.close()
    with anyio.fail_after(10):
        await agent.shutdown(_FAST)
    assert agent.returncode is not None
    assert len(os.listdir("/proc/self/fd")) == fds
    assert pipes._enlarged[0] == budget


_ORCHESTRATE = """
import os, sys, anyio
from pathlib import Path
from orchestrate.process.pipes import AgentProcess, ProcessSpec, STDOUT_PIPE_BYTES
AGENT = '''
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # an orphaned grandchild, out of the agent's session
        time.sleep(60)
    os._exit(0)
open(sys.argv[1] + '.agent', 'w').write(str(os.getpid()))
time.sleep(60)
'''
async def main() -> None:
    out = sys.argv[1]
    spec = ProcessSpec(argv=[sys.executable, '-c', AGENT, out], cwd=Path(out).parent, env=dict(os.environ))
    agent = await AgentProcess.spawn(spec, STDOUT_PIPE_BYTES)
    while not os.path.exists(out + '.agent'):
        await anyio.sleep(0.01)
    open(out, 'w').write(str(agent.process.pid))
    await anyio.sleep(60)
anyio.run(main)
"""


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, queue = set(), [root]
    while queue:
        kids = children.get(queue.pop(), [])
        found.update(kids)
        queue += kids
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_kill_9_of_orchestrate_takes_the_agent_and_its_orphaned_grandchild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Popen spawn path (live18), supervised: orchestrate killed with SIGKILL mid-run leaves
    # nothing behind, the agent nor a grandchild that left its session (the supervisor is a
    # subreaper and sees orchestrate go).
    import signal
    import subprocess

    monkeypatch.setenv("ORCHESTRATE_SUPERVISOR", "1")
    monkeypatch.setenv("ORCHESTRATE_CGROUPS", "0")
    out = tmp_path / "pids"
    runner = subprocess.Popen([sys.executable, "-c", _ORCHESTRATE, str(out)])  # noqa: ASYNC220
    try:
        deadline = time.monotonic() + 10
        while not out.exists() or not out.read_text():
            assert time.monotonic() < deadline, "the agent did not start"
            await anyio.sleep(0.02)
        supervisor = int(out.read_text())
        agent = int((tmp_path / "pids.agent").read_text())
        await anyio.sleep(0.2)  # the grandchild forked
        tree = _descendants(supervisor)
        assert agent in tree and len(tree) >= 2
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait(5)
    deadline = time.monotonic() + 8
    while any(_alive(pid) for pid in tree | {supervisor}):
        if time.monotonic() > deadline:
            left = [pid for pid in tree | {supervisor} if _alive(pid)]
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            pytest.fail(f"outlived orchestrate: {left}")
        await anyio.sleep(0.05)
