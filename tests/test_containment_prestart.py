"""Containment of an agent started before the event loop (process/prestart.py, the CLI's early
start): the same supervisor, subreaper, PDEATHSIG and cgroup from its first instruction, whether it
is adopted by a run or discarded."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import pytest

from orchestrate.process.pipes import AgentProcess, Chunk
from orchestrate.process.prestart import prestart
from orchestrate.process.spec import ProcessSpec

from . import test_containment as contained
from .helpers import marked
from .test_containment import FAST, alive, escapees, escaper, our_cgroups, settle

mode = contained.mode  # the same fixtures: each mechanism the machine offers, the escapees' mark
mark = contained.mark

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(sys.platform != "linux", reason="Linux containment")]


async def test_an_adopted_agent_is_contained_and_its_escapees_die(
    tmp_path: Path, mode: str, mark: str
) -> None:
    started = prestart(escaper(tmp_path))
    assert started is not None
    pids = await escapees(tmp_path)  # running, and escaped, before any event loop saw it
    proc = await AgentProcess.adopt(started)
    assert proc.containment.mechanism == mode and proc.pid == pids["agent"]
    with anyio.fail_after(15):
        rc = await proc.shutdown(FAST)
    assert rc == -signal.SIGKILL
    assert alive(pids) == {} and marked(mark) == [] and our_cgroups() == []


async def test_a_discarded_start_leaves_nothing(tmp_path: Path, mode: str, mark: str) -> None:
    started = prestart(escaper(tmp_path))
    assert started is not None
    pids = await escapees(tmp_path)
    started.discard()
    assert alive(pids) == {} and marked(mark) == [] and our_cgroups() == []
    assert started.popen.returncode is not None  # the supervisor reaped


async def test_the_agent_dies_with_a_process_that_never_adopted_it(
    tmp_path: Path, mode: str, mark: str
) -> None:
    """The early start's owner SIGKILLed before adoption: the supervisor sees its socket close."""
    code = (
        "import os, sys\n"
        "from orchestrate.process.prestart import prestart\n"
        "from orchestrate.process.spec import ProcessSpec\n"
        "from pathlib import Path\n"
        f"started = prestart(ProcessSpec({[sys.executable, str(escaper(tmp_path).argv[1])]!r}, "
        f"Path({str(tmp_path)!r}), {escaper(tmp_path).env!r}))\n"
        "sys.stdin.read()\n"
    )
    owner = await anyio.open_process([sys.executable, "-c", code], stdout=None, stderr=None)
    async with owner:
        try:
            pids = await escapees(tmp_path)
        finally:
            owner.kill()
    # The supervisor, their subreaper, kills the whole tree (and removes the cgroup) on its own.
    assert await settle(pids) == {}
    assert await settle({str(p): p for p in marked(mark)}) == {}


async def test_an_adopted_agent_is_read_and_written_through_the_loop(tmp_path: Path, mode: str) -> None:
    spec = ProcessSpec(["/bin/cat"], tmp_path, {"PATH": "/usr/bin:/bin"})
    started = prestart(spec)
    assert started is not None
    proc = await AgentProcess.adopt(started)
    send, receive = anyio.create_memory_object_stream[Chunk](16)
    got = b""
    async with anyio.create_task_group() as tg:
        tg.start_soon(proc.pump, send)
        await proc.write(b"hello " * 20000)  # larger than a pipe: written as the loop says it has room
        await proc.close_stdin()
        with anyio.fail_after(10):
            async with receive:
                async for chunk in receive:
                    if chunk.stream == "stdout":
                        got += chunk.data
    assert got == b"hello " * 20000
    assert await proc.wait(10) and proc.returncode == 0
    await proc.shutdown(FAST)
    assert started.popen.returncode == 0  # the supervisor, reaped by us, exited as the agent did
