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


# --- an early start that was sent its first message (cli/early.py, run/early_opening.py) ----------


async def test_a_discarded_start_that_was_written_to_is_killed_whole(
    tmp_path: Path, mode: str, mark: str
) -> None:
    """A run refused after the early write: the agent read its prompt, so it is killed at once,
    escapees too (its cgroup is killed from here as well as by its supervisor)."""
    started = prestart(escaper(tmp_path))
    assert started is not None
    pids = await escapees(tmp_path)
    opening = object()
    assert started.write((b'{"type":"user"}\n', b"second\n"), opening)
    assert [data for data, _ in started.written] == [b'{"type":"user"}\n', b"second\n"]
    assert started.was_written and started.opening is opening
    started.discard()
    assert started.discarded
    assert alive(pids) == {} and marked(mark) == [] and our_cgroups() == []


async def test_the_agent_dies_with_a_process_killed_after_the_early_write(
    tmp_path: Path, mode: str, mark: str
) -> None:
    """SIGKILL of the early start's owner after it wrote the prompt, before any run adopted the
    agent: the supervisor sees its socket close and kills the whole tree."""
    spec = escaper(tmp_path)
    code = (
        "import sys\n"
        "from orchestrate.process.prestart import prestart\n"
        "from orchestrate.process.spec import ProcessSpec\n"
        "from pathlib import Path\n"
        f"started = prestart(ProcessSpec({spec.argv!r}, Path({str(tmp_path)!r}), {spec.env!r}))\n"
        "assert started.write((b'hello\\n',), None)\n"
        "print('written', flush=True)\n"
        "sys.stdin.read()\n"
    )
    owner = await anyio.open_process([sys.executable, "-c", code], stderr=None)
    async with owner:
        try:
            pids = await escapees(tmp_path)
            assert owner.stdout is not None
            with anyio.fail_after(10):
                assert (await owner.stdout.receive()).startswith(b"written")
        finally:
            owner.kill()
    assert await settle(pids) == {}
    assert await settle({str(p): p for p in marked(mark)}) == {}


async def test_an_early_write_that_cannot_go_in_whole_is_not_made(tmp_path: Path, mode: str) -> None:
    """More than the empty pipe holds: nothing is written (the run writes it later, blocking as it
    may); a pipe already closed: the start must be discarded, and says it was written to."""
    spec = ProcessSpec(["/bin/sleep", "30"], tmp_path, {"PATH": "/usr/bin:/bin"})
    started = prestart(spec)
    assert started is not None
    try:
        assert not started.write((b"x" * (1 << 20) + b"\n",), None)
        assert started.written == [] and not started.was_written and started.opening is None
    finally:
        started.discard()
    gone = prestart(ProcessSpec(["/bin/true"], tmp_path, {"PATH": "/usr/bin:/bin"}))
    assert gone is not None
    with anyio.fail_after(10):
        while gone.popen.poll() is None:  # noqa: ASYNC110 - the supervisor exits as the agent did
            await anyio.sleep(0.01)
    assert not gone.write((b"hello\n",), None)
    assert gone.was_written  # it may have gone in part: never adopted then
    gone.discard()
