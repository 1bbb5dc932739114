from __future__ import annotations

import fcntl
import gc
import math
import os
import sys
import time
from pathlib import Path

import anyio
import pytest

from orchestrate.errors import ConfigError, ProcessExitedError, SpawnError
from orchestrate.process import pipes
from orchestrate.process.env import build_env, parse_env_overrides
from orchestrate.process.pipes import STDOUT_PIPE_BYTES, AgentProcess, Chunk, ProcessSpec, ShutdownPolicy
from orchestrate.process.rawlog import RawLogWriter, read_raw_log

from .helpers import group_members, pid_alive

pytestmark = pytest.mark.anyio


def spec(code: str, tmp_path: Path) -> ProcessSpec:
    return ProcessSpec(
        argv=[sys.executable, "-c", code], cwd=tmp_path, env=build_env({"PATH": "/usr/bin:/bin"})
    )


async def collect(proc: AgentProcess) -> list[Chunk]:
    send, recv = anyio.create_memory_object_stream[Chunk](math.inf)
    chunks: list[Chunk] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(proc.pump, send)
        async with recv:
            async for chunk in recv:
                chunks.append(chunk)
    return chunks


def test_environment_layers() -> None:
    env = build_env({"A": "1", "CLAUDECODE": "1", "B": "x"}, {"B": "exec", "C": "3"}, {"C": "user"})
    assert env == {"A": "1", "B": "exec", "C": "user"}
    assert build_env({}, {}, {"CLAUDECODE": "keep"}) == {"CLAUDECODE": "keep"}
    assert parse_env_overrides(["K=V", "E=", "X=a=b"]) == {"K": "V", "E": "", "X": "a=b"}
    with pytest.raises(ConfigError):
        parse_env_overrides(["novalue"])


async def test_stdout_and_stderr_drained_concurrently(tmp_path: Path) -> None:
    # 1 MiB on each stream: a reader that drained one before the other would deadlock.
    code = "import sys\nfor _ in range(64):\n sys.stderr.write('e'*16384); sys.stdout.write('o'*16384)\n"
    proc = await AgentProcess.spawn(spec(code, tmp_path))
    with anyio.fail_after(20):
        chunks = await collect(proc)
    assert sum(len(c.data) for c in chunks if c.stream == "stdout") == 1 << 20
    assert sum(len(c.data) for c in chunks if c.stream == "stderr") == 1 << 20
    assert len(proc.stderr_tail) <= 8192 and proc.stderr_tail.endswith("e")
    assert await proc.shutdown() == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux's")
async def test_a_flood_already_written_comes_in_one_read_of_up_to_a_mebibyte(tmp_path: Path) -> None:
    """The agent's stdout pipe holds 1 MiB (not the default 64 KiB): 900 kB written before we read
    fit in it (the agent says so on stderr only once its writes returned, which it could not with
    a 64 KiB pipe) and come in one read, not fourteen; a line written after that, alone, is read
    at once, alone (a read takes what is there, it never waits for more)."""
    code = (
        "import sys\n"
        "sys.stdout.buffer.write(b'x' * 900_000); sys.stdout.flush()\n"
        "sys.stderr.write('written\\n'); sys.stderr.flush()\n"
        "sys.stdin.readline()\n"
        "sys.stdout.buffer.write(b'late\\n'); sys.stdout.flush()\n"
        "sys.stdin.readline()\n"
    )
    proc = await AgentProcess.spawn(spec(code, tmp_path), STDOUT_PIPE_BYTES)
    out, err = proc.process.stdout, proc.process.stderr
    assert out is not None and err is not None
    with anyio.fail_after(10):  # a 64 KiB pipe: the agent blocks on its write and never says this
        assert await err.receive() == b"written\n"
        first = await out.receive(1 << 20)
        assert len(first) == 900_000
        await proc.write(b"go\n")
        assert await out.receive(1 << 20) == b"late\n"
        await proc.write(b"end\n")
    assert await proc.shutdown() == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux's")
async def test_enlarged_pipes_share_a_budget_and_give_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's pipes share a kernel quota, past which every new pipe of that user is a page or
    two: the stdout pipes enlarged here hold at most ENLARGED_PIPES_BUDGET together.  With room for
    two, the third of three live agents keeps the default 64 KiB (read in 64 KiB pieces), and once
    one of the first two has ended its room goes to the next agent."""
    monkeypatch.setattr(pipes, "ENLARGED_PIPES_BUDGET", 2 * STDOUT_PIPE_BYTES)
    held = pipes._enlarged[0]
    code = "import sys\nsys.stdin.readline()\n"

    def capacity(proc: AgentProcess) -> int:
        out = proc.process.stdout
        assert out is not None
        return int(fcntl.fcntl(out._fd, fcntl.F_GETPIPE_SZ))  # type: ignore[attr-defined]

    procs = [await AgentProcess.spawn(spec(code, tmp_path), STDOUT_PIPE_BYTES) for _ in range(3)]
    try:
        assert [capacity(p) for p in procs] == [STDOUT_PIPE_BYTES, STDOUT_PIPE_BYTES, 1 << 16]
        assert procs[2].process.stdout.read_size == 1 << 16  # type: ignore[attr-defined]
        await procs[0].write(b"end\n")
        assert await procs[0].shutdown() == 0
        assert pipes._enlarged[0] == held + STDOUT_PIPE_BYTES
        procs.append(await AgentProcess.spawn(spec(code, tmp_path), STDOUT_PIPE_BYTES))
        assert capacity(procs[3]) == STDOUT_PIPE_BYTES
    finally:
        for proc in procs[1:]:
            await proc.write(b"end\n")
            await proc.shutdown()
    assert pipes._enlarged[0] == held


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux's")
def test_an_enlarged_pipe_dropped_unclosed_gives_its_share_back() -> None:
    """A reader that is dropped without aclose (a run that failed before its cleanup) gives its
    share of the budget back when it goes, and closes its pipe: else each such run would leave
    every later agent of this process with smaller pipes.  One that never got a share gives
    nothing back."""
    held = pipes._enlarged[0]
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    reader = pipes._FdReceive(os.fdopen(read_fd, "rb", buffering=0), STDOUT_PIPE_BYTES)
    assert reader._enlarged == STDOUT_PIPE_BYTES
    assert pipes._enlarged[0] == held + STDOUT_PIPE_BYTES
    fd = reader._fd
    del reader
    gc.collect()
    assert pipes._enlarged[0] == held
    with pytest.raises(OSError):  # closed quietly with it (no ResourceWarning: pytest fails on one)
        os.fstat(fd)
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    plain = pipes._FdReceive(os.fdopen(read_fd, "rb", buffering=0))
    del plain
    gc.collect()
    assert pipes._enlarged[0] == held


async def test_pump_reads_a_flood_in_chunks_of_up_to_the_pipe_size(tmp_path: Path) -> None:
    """Through the pump, as a run reads: 8 MiB written faster than it is read arrive whole and in
    order, no chunk larger than the pipe, and in far fewer chunks than 64 KiB reads would take."""
    code = "import sys\nfor i in range(128):\n sys.stdout.buffer.write(bytes([65 + i % 26]) * 65536)\n"
    proc = await AgentProcess.spawn(spec(code, tmp_path), STDOUT_PIPE_BYTES)
    with anyio.fail_after(20):
        chunks = [c.data for c in await collect(proc) if c.stream == "stdout"]
    data = b"".join(chunks)
    assert data == b"".join(bytes([65 + i % 26]) * 65536 for i in range(128))
    assert max(map(len, chunks)) <= 1 << 20
    if sys.platform.startswith("linux"):
        assert max(map(len, chunks)) > 1 << 16, [len(c) for c in chunks]
    assert await proc.shutdown() == 0


async def test_raw_log_records_both_directions_and_replays_exact_bytes(tmp_path: Path) -> None:
    log = RawLogWriter(tmp_path / "raw.jsonl", {"executor": "test"})
    code = "import sys\nd=sys.stdin.buffer.readline()\nsys.stdout.buffer.write(b'got ' + d + b'\\xff\\n')\n"
    proc = await AgentProcess.spawn(spec(code, tmp_path))
    proc.on_write = lambda data, ts: log.chunk("stdin", data, ts)
    await proc.write(b"hello\n")
    log.event({"type": "approval", "decision": "approved"}, 1.0)
    with anyio.fail_after(10):
        for chunk in await collect(proc):
            log.chunk(chunk.stream, chunk.data, chunk.ts)
    await proc.shutdown()
    log.close()
    header, records = read_raw_log(tmp_path / "raw.jsonl")
    assert header is not None and header["executor"] == "test"
    recs = list(records)
    assert recs[0].stream == "stdin" and recs[0].data == b"hello\n"
    assert recs[1].event == {"type": "approval", "decision": "approved"}
    assert b"".join(r.data for r in recs if r.stream == "stdout") == b"got hello\n\xff\n"
    assert all(r.ts is not None for r in recs)


async def test_plain_capture_reads_as_stdout(tmp_path: Path) -> None:
    (tmp_path / "cap.jsonl").write_bytes(b'{"type":"result"}\n')
    header, records = read_raw_log(tmp_path / "cap.jsonl")
    assert header is None and [r.data for r in records] == [b'{"type":"result"}\n']


async def test_ladder_kills_a_term_ignoring_agent_and_its_children(tmp_path: Path) -> None:
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "c = subprocess.Popen(['sleep', '300'])\n"
        "print(c.pid, flush=True)\n"
        "sys.stdin.close()\n"
        "time.sleep(300)\n"
    )
    proc = await AgentProcess.spawn(spec(code, tmp_path))
    assert proc.process.stdout is not None
    child = int((await proc.process.stdout.receive()).decode().split()[0])
    assert pid_alive(child)
    start = time.monotonic()
    with anyio.fail_after(15):
        rc = await proc.shutdown(ShutdownPolicy(interrupt_grace=0.2, stdin_grace=0.3, term_grace=0.3))
    assert rc == -9  # SIGTERM was ignored; SIGKILL ended it
    assert time.monotonic() - start < 5
    assert not pid_alive(child) and group_members(proc.pid) == []


async def test_ladder_stops_at_stdin_close_for_a_well_behaved_agent(tmp_path: Path) -> None:
    proc = await AgentProcess.spawn(spec("import sys\nsys.stdin.read()\n", tmp_path))
    interrupted = []

    async def interrupt() -> None:
        interrupted.append(True)

    with anyio.fail_after(10):
        assert await proc.shutdown(interrupt=interrupt) == 0
    assert interrupted == [True]


async def test_shutdown_completes_when_the_caller_is_cancelled(tmp_path: Path) -> None:
    proc = await AgentProcess.spawn(spec("import time\ntime.sleep(300)\n", tmp_path))
    with anyio.move_on_after(0.1):
        await proc.shutdown(ShutdownPolicy(stdin_grace=0.5, term_grace=0.5))
    assert proc.returncode is not None and group_members(proc.pid) == []


async def test_spawn_error_and_write_after_exit(tmp_path: Path) -> None:
    with pytest.raises(SpawnError, match="no-such-agent"):
        await AgentProcess.spawn(ProcessSpec(["/nonexistent/no-such-agent"], tmp_path, {}))
    proc = await AgentProcess.spawn(spec("pass", tmp_path))
    await proc.wait(10)
    with pytest.raises(ProcessExitedError):
        for _ in range(50):  # the pipe may take a write or two to report the closed reader
            await proc.write(b"x" * 65536)
    await proc.shutdown()
