"""An agent process over pipes, contained (containment.py), with a bounded shutdown ladder.

Bytes only: this module knows nothing of JSON.  Chunks read come out of :meth:`AgentProcess.pump`
with their time; chunks written are reported to ``on_write``.  The run records both in the raw log
at the moment it hands them to the normalizer, so the log's order is the order they were seen in.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from anyio.streams.memory import MemoryObjectSendStream

from ..errors import ProcessExitedError, SpawnError
from .containment import Containment, prepare
from .rawlog import StreamName
from .spec import ProcessSpec

if TYPE_CHECKING:
    from .prestart import Prestarted

__all__ = ["STDOUT_PIPE_BYTES", "AgentProcess", "Chunk", "ProcessSpec", "ShutdownPolicy", "climb_ladder"]

_READ_SIZE = 1 << 16
# The agent's stdout pipe holds up to this much (Linux: F_SETPIPE_SZ; the default is 64 KiB).  An
# agent that prints faster than the run reads then has its output taken in one read of up to this
# size instead of one per 64 KiB, and everything done per chunk (the chunk stream's hop, the raw
# log's record, the normalizer's framing) is done about 16 times less often.  What is read is
# still only what is there: a slow agent's line comes in a read of its own, as soon as it is
# written.  Bounded: the kernel holds at most this much for us; a process over its user's pipe
# quota keeps the default.  Asked for by the run for its agent (STDOUT_PIPE_BYTES), not by every
# process spawned here: a terminal's command keeps small chunks under its own output limit.
STDOUT_PIPE_BYTES = 1 << 20
# A user's pipes share one quota (/proc/sys/fs/pipe-user-pages-soft, 64 MiB by default), and past
# it every new pipe of that user (the agents' own, git's, the shell's) gets a page or two.  So the
# pipes enlarged here hold at most this much together: the runs of a busy `serve` past it keep the
# default size (read in 64 KiB pieces, as before), and the quota keeps room for everyone else.
ENLARGED_PIPES_BUDGET = 16 << 20
_enlarged = [0]  # bytes held by the pipes enlarged so far and not yet closed
_STDERR_TAIL_BYTES = 8192


@dataclass(frozen=True)
class ShutdownPolicy:
    """Graces of the shutdown ladder, in seconds: after the protocol's interrupt, after closing
    stdin, after SIGTERM to the group.  SIGKILL follows the last."""

    interrupt_grace: float = 2.0
    stdin_grace: float = 2.0
    term_grace: float = 3.0


@dataclass(frozen=True, slots=True)
class Chunk:
    stream: StreamName
    data: bytes
    ts: float  # wall clock, seconds since the epoch


@dataclass
class AgentProcess:
    """A running agent.  Create with :meth:`spawn`; always end with :meth:`shutdown`."""

    process: Process
    spec: ProcessSpec
    containment: Containment
    _stderr_tail: deque[bytes] = field(default_factory=deque)
    _stderr_size: int = 0
    _write_lock: anyio.Lock = field(default_factory=anyio.Lock)
    on_write: Callable[[bytes, float], None] | None = None
    """Told of every chunk written to stdin, before it is sent (the run feeds it to the normalizer)."""

    @classmethod
    async def spawn(cls, spec: ProcessSpec, stdout_bytes: int | None = None) -> AgentProcess:
        """Start the agent, contained (see containment.py): in its own process group and, where the
        machine allows, under a supervisor and in a cgroup, so nothing it starts outlives the run.
        ``stdout_bytes``: the capacity its stdout pipe is given, and the most one read takes
        (None: the system's default, 64 KiB)."""
        process, contained = await open_contained(
            spec.argv,
            spec.cwd,
            spec.env,
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdout_bytes=stdout_bytes,
        )
        return cls(process, spec, contained)

    @classmethod
    async def adopt(cls, prestarted: Prestarted, stdout_bytes: int | None = None) -> AgentProcess:
        """Take over an agent started before the event loop existed (prestart.py), as if
        :meth:`spawn` had started it: the supervisor's answer is awaited here, so an agent that
        could not be started raises SpawnError here too."""
        started = prestarted.take()
        process = _PopenProcess(started.popen, stdout_bytes)
        try:
            contained = await started.launch.started(process.pid, lambda: process.returncode is not None)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await process.aclose()  # the supervisor is exiting: our socket end is closed
            raise
        return cls(process, started.spec, contained)

    @property
    def pid(self) -> int:
        """The agent's own pid, the number of its process group too."""
        return self.containment.agent_pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @property
    def stderr_tail(self) -> str:
        return b"".join(self._stderr_tail).decode("utf-8", "replace")[-_STDERR_TAIL_BYTES:]

    async def write(self, data: bytes) -> None:
        """Send bytes to the agent's stdin; raises ProcessExitedError when the pipe is gone."""
        stdin = self.process.stdin
        assert stdin is not None
        async with self._write_lock:
            if self.on_write is not None:
                self.on_write(data, time.time())
            try:
                await stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise ProcessExitedError(
                    self.returncode, self.stderr_tail, "the agent's stdin is closed"
                ) from exc

    async def close_stdin(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError):
                await self.process.stdin.aclose()

    async def pump(self, sink: MemoryObjectSendStream[Chunk]) -> None:
        """Drain stdout and stderr concurrently into ``sink`` until both reach EOF, then close it."""
        async with sink, anyio.create_task_group() as tg:
            assert self.process.stdout is not None and self.process.stderr is not None
            tg.start_soon(self._drain, self.process.stdout, "stdout", sink.clone())
            tg.start_soon(self._drain, self.process.stderr, "stderr", sink.clone())

    async def _drain(
        self, stream: ByteReceiveStream, name: StreamName, sink: MemoryObjectSendStream[Chunk]
    ) -> None:
        size = stream.read_size if isinstance(stream, _FdReceive) else _READ_SIZE
        async with sink:
            while True:
                try:
                    data = await stream.receive(size)
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return
                if name == "stderr":
                    self._keep_stderr(data)
                await sink.send(Chunk(name, data, time.time()))

    def _keep_stderr(self, data: bytes) -> None:
        self._stderr_tail.append(data)
        self._stderr_size += len(data)
        while self._stderr_size - len(self._stderr_tail[0]) >= _STDERR_TAIL_BYTES:
            self._stderr_size -= len(self._stderr_tail.popleft())

    async def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for exit; True when it exited."""
        with anyio.move_on_after(seconds):
            await self.process.wait()
        return self.process.returncode is not None

    async def shutdown(
        self,
        policy: ShutdownPolicy = ShutdownPolicy(),
        interrupt: Callable[[], Awaitable[None]] | None = None,
    ) -> int | None:
        """Climb the shutdown ladder (:func:`climb_ladder`), then close our ends of the pipes."""
        await climb_ladder(self, policy, interrupt)
        with anyio.CancelScope(shield=True):
            await self.containment.release()
            await self._close_streams()
        return self.returncode

    def send_signal(self, sig: signal.Signals) -> None:
        self.containment.signal(sig)

    def _signal_group(self, sig: signal.Signals) -> None:
        self.containment.signal_group(sig)

    def _kill_all(self) -> None:
        self.containment.kill()

    async def _close_streams(self) -> None:
        # The process's own aclose: it closes the pipe transports too, not only the streams.
        with anyio.move_on_after(5), contextlib.suppress(Exception):
            await self.process.aclose()


class _Stoppable(Protocol):
    """What the ladder needs of an agent process, over pipes or in a terminal."""

    @property
    def returncode(self) -> int | None: ...

    async def close_stdin(self) -> None: ...

    async def wait(self, seconds: float) -> bool: ...

    def _signal_group(self, sig: signal.Signals) -> None: ...

    def _kill_all(self) -> None: ...


async def climb_ladder(
    process: _Stoppable,
    policy: ShutdownPolicy,
    interrupt: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """The ladder: the protocol's interrupt, end of input, SIGTERM the group, SIGKILL everything.

    Shielded, so a cancelled caller still cleans up, and bounded by the policy's graces.  The whole
    tree is SIGKILLed at the end in every case, so tool processes the agent left behind die too,
    also those that left its process group (see containment.py).
    """
    with anyio.CancelScope(shield=True):
        if interrupt is not None and process.returncode is None:
            # Agents that stay alive after an interrupt (Claude does) still exit on end of input,
            # so the next rung follows at once; the interrupt only lets the turn end cleanly.
            with anyio.move_on_after(policy.interrupt_grace), contextlib.suppress(Exception):
                await interrupt()
        if process.returncode is None:
            await process.close_stdin()
            await process.wait(policy.stdin_grace)
        if process.returncode is None:
            process._signal_group(signal.SIGTERM)
            await process.wait(policy.term_grace)
        process._kill_all()
        await process.wait(5.0)


def spawn_failure(argv: list[str], cwd: Path, exc: OSError) -> SpawnError:
    """Why ``argv`` could not start.  A missing working directory fails the spawn with the same
    ENOENT as a missing program: name the directory, not the program, when that is the cause."""
    if not Path(cwd).is_dir():
        return SpawnError(argv, f"the working directory {str(cwd)!r} does not exist or is not a directory")
    return SpawnError(argv, exc.strerror or str(exc))


async def open_contained(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    *,
    stdin: int,
    stderr: int,
    stdout_bytes: int | None = None,
) -> tuple[Process, Containment]:
    """Spawn ``argv`` (stdout a pipe) in a new session, contained; SpawnError when it cannot start.

    Spawned with ``subprocess.Popen`` and read straight from the pipes (:class:`_PopenProcess`), as
    an agent started before the event loop is (prestart.py): asyncio's subprocess transport would
    copy every byte into its stream buffer and out again, and keep a thread per process to reap it
    (a pidfd says when it exits)."""
    launch = prepare(argv, env)  # the environment again: the agent gets exactly it
    try:
        # A new session: the terminal's Ctrl-C reaches us, not the agent; we interrupt it our way.
        # (Blocking only for the fork and exec, as asyncio's own subprocess transport is.)
        popen = subprocess.Popen(  # noqa: ASYNC220
            launch.argv,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=cwd,
            env=env,
            start_new_session=True,
            pass_fds=launch.pass_fds,
        )
    except OSError as exc:
        launch.abandon()
        raise spawn_failure(argv, cwd, exc) from exc
    process = _PopenProcess(popen, stdout_bytes)
    try:
        return process, await launch.started(process.pid, lambda: process.returncode is not None)
    except BaseException:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await process.aclose()  # the supervisor is exiting: our socket end is closed
        raise


# --- a process read and written through its pipes' file descriptors ---------------------------------


def _pipe_capacity(fd: int, wanted: int) -> int:
    """Make the pipe ``fd`` hold ``wanted`` bytes where the system and :data:`ENLARGED_PIPES_BUDGET`
    allow; the bytes counted against that budget (0: the pipe keeps its default size)."""
    if _enlarged[0] + wanted > ENLARGED_PIPES_BUDGET:
        return 0
    try:
        got = fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, wanted)
    except (AttributeError, OSError):  # not Linux, or over the user's pipe quota
        return 0
    _enlarged[0] += got
    return got


class _FdReceive(ByteReceiveStream):
    """The read end of a pipe, non-blocking, read when the event loop says it is readable.
    ``read_size``: the most one :meth:`receive` takes when asked for no particular size (the
    pipe's capacity: whatever is there comes in one read)."""

    # (class values until __init__ has set them: __del__ reads them, even after a failed __init__)
    _enlarged = 0
    _closed = True

    def __init__(self, file: IO[bytes], enlarge: int | None = None) -> None:
        self._file = file
        self._fd = file.fileno()
        # What this pipe holds against the enlarged pipes' budget, given back when it is closed
        # (or when it is dropped unclosed: __del__).
        self._enlarged = 0 if enlarge is None else _pipe_capacity(self._fd, enlarge)
        self.read_size = max(self._enlarged, _READ_SIZE)
        os.set_blocking(self._fd, False)
        self._closed = False

    async def receive(self, max_bytes: int | None = None) -> bytes:
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                data = os.read(self._fd, max_bytes or self.read_size)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            if not data:
                raise anyio.EndOfStream
            return data

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._give_back()
            anyio.notify_closing(self._fd)  # a reader waiting on it wakes with ClosedResourceError
            self._file.close()

    def _give_back(self) -> None:
        _enlarged[0] -= self._enlarged
        self._enlarged = 0

    def __del__(self) -> None:
        # A process object dropped without aclose (its run failed before its cleanup): its share
        # of the budget comes back here, or every such run would shrink the pipes of all later
        # ones for the life of this process; the pipe is ours, so it is closed too.
        self._give_back()
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError):
                self._file.close()


class _FdSend(ByteSendStream):
    """The write end of a pipe, non-blocking, written as the event loop says it has room."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self._fd = file.fileno()
        os.set_blocking(self._fd, False)
        self._closed = False

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
                continue
            except OSError as exc:  # EPIPE: the agent is gone (SIGPIPE is ignored in Python)
                raise anyio.BrokenResourceError from exc
            view = view[written:]

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            anyio.notify_closing(self._fd)
            with contextlib.suppress(OSError):
                self._file.close()


class _Popen(Protocol):
    """What :class:`_PopenProcess` uses of ``subprocess.Popen`` (prestart.Spawned has it too)."""

    @property
    def pid(self) -> int: ...
    @property
    def stdin(self) -> IO[bytes] | None: ...
    @property
    def stdout(self) -> IO[bytes] | None: ...
    @property
    def stderr(self) -> IO[bytes] | None: ...
    def poll(self) -> int | None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def send_signal(self, sig: int) -> None: ...


class _PopenProcess(Process):
    """anyio's view of a process that ``subprocess.Popen`` started (here, or before the event loop
    existed: prestart.py): its pipes read and written through the loop, its exit seen through a
    pidfd.  ``stdout_bytes``: its stdout pipe is enlarged to that (:data:`STDOUT_PIPE_BYTES`) and
    read up to its size."""

    def __init__(self, popen: _Popen, stdout_bytes: int | None = None) -> None:
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        self._popen = popen
        self._stdin = _FdSend(popen.stdin)
        self._stdout = _FdReceive(popen.stdout, stdout_bytes)
        self._stderr = _FdReceive(popen.stderr)
        self._pidfd: int | None = None
        self._waiting = False
        with contextlib.suppress(AttributeError, OSError):
            self._pidfd = os.pidfd_open(popen.pid)  # not reaped yet (only we reap it): it is ours

    async def wait(self) -> int:
        while (code := self._popen.poll()) is None:
            if self._pidfd is not None and not self._waiting:  # one waiter per fd in anyio
                self._waiting = True
                try:
                    await anyio.wait_readable(self._pidfd)  # readable once the process has exited
                finally:
                    self._waiting = False
            else:
                await anyio.sleep(0.01)  # another task waits on the pidfd, or a kernel before 5.3
        return code

    async def aclose(self) -> None:
        for stream in (self._stdin, self._stdout, self._stderr):
            await stream.aclose()
        try:
            await self.wait()
        finally:
            if self._pidfd is not None:
                anyio.notify_closing(self._pidfd)
                os.close(self._pidfd)
                self._pidfd = None

    def terminate(self) -> None:
        self._popen.terminate()

    def kill(self) -> None:
        self._popen.kill()

    def send_signal(self, signal: int) -> None:
        self._popen.send_signal(signal)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()  # reaps it if it has exited: no watcher does it for us

    @property
    def stdin(self) -> ByteSendStream:
        return self._stdin

    @property
    def stdout(self) -> ByteReceiveStream:
        return self._stdout

    @property
    def stderr(self) -> ByteReceiveStream:
        return self._stderr
