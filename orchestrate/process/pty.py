"""An agent in a pseudo-terminal, for CLIs that only have a text UI.

ptyprocess spawns the child in a new session (the terminal's) and sets the window size.  The child
is the supervisor of containment.py where it can run; it starts the agent as the terminal's
foreground process group, so Ctrl-C typed in the terminal and window-size changes reach the agent.
Nothing here blocks the event loop: the master side is read with ``anyio.wait_readable`` and
non-blocking ``os.read``.  It offers what the run needs of an agent process (see pipes.py): output
comes out of :meth:`pump` as ``stdout`` chunks (a terminal merges stderr in), keys go in through
:meth:`write`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from ptyprocess import PtyProcess

from ..errors import ProcessExitedError
from .containment import Containment, prepare
from .pipes import Chunk, ProcessSpec, ShutdownPolicy, climb_ladder, spawn_failure

__all__ = ["PtyAgentProcess"]

_READ_SIZE = 1 << 16
DEFAULT_SIZE = (50, 140)  # rows, columns: room for a TUI's whole answer without scrolling
EOF_KEY = b"\x04"


@dataclass
class PtyAgentProcess:
    child: PtyProcess
    spec: ProcessSpec
    containment: Containment
    on_write: Callable[[bytes, float], None] | None = None
    _returncode: int | None = None
    _write_lock: anyio.Lock = field(default_factory=anyio.Lock)

    @classmethod
    async def spawn(cls, spec: ProcessSpec, size: tuple[int, int] = DEFAULT_SIZE) -> PtyAgentProcess:
        # The agent asks its terminal for its size: a COLUMNS or LINES passed on from our own
        # environment (a CI runner's, pytest-xdist's 80x24) would win over it in most programs, and
        # the agent would draw for a screen other than the one we read it through.
        env = {k: v for k, v in spec.env.items() if k not in ("COLUMNS", "LINES")}
        env["TERM"] = spec.env.get("TERM", "xterm-256color")
        launch = prepare(spec.argv, env)  # the environment again: the agent gets exactly it
        try:
            child = PtyProcess.spawn(
                launch.argv,
                cwd=str(spec.cwd),
                env=env,
                dimensions=size,
                pass_fds=launch.pass_fds,
                preexec_fn=launch.inherit,
            )
        except (OSError, FileNotFoundError) as exc:
            launch.abandon()
            raise spawn_failure(spec.argv, spec.cwd, exc) from exc
        os.set_blocking(child.fd, False)
        process = cls(child, spec, None)  # type: ignore[arg-type]  # contained just below
        try:
            process.containment = await launch.started(child.pid, lambda: process._returncode is not None)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await process.wait(5.0)
                process._close_terminal()
            raise
        return process

    @property
    def pid(self) -> int:
        """The agent's own pid, the number of its process group too."""
        return self.containment.agent_pid

    @property
    def returncode(self) -> int | None:
        if self._returncode is None:
            self._reap(os.WNOHANG)
        return self._returncode

    @property
    def stderr_tail(self) -> str:
        return ""  # a terminal has one stream: whatever the agent printed is in the output

    def resize(self, rows: int, cols: int) -> None:
        self.child.setwinsize(rows, cols)

    async def write(self, data: bytes) -> None:
        async with self._write_lock:
            if self.on_write is not None:
                self.on_write(data, time.time())
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(self.child.fd, view) :]
                except BlockingIOError:
                    await anyio.wait_writable(self.child.fd)
                except OSError as exc:
                    raise ProcessExitedError(self.returncode, "", "the agent's terminal is closed") from exc

    async def close_stdin(self) -> None:
        # A terminal has no stdin to close: end-of-file is a key.
        with contextlib.suppress(ProcessExitedError):
            await self.write(EOF_KEY)

    async def pump(self, sink: MemoryObjectSendStream[Chunk]) -> None:
        """Everything the terminal shows, as ``stdout`` chunks, until the child closes it."""
        async with sink:
            while True:
                try:
                    await anyio.wait_readable(self.child.fd)
                    data = os.read(self.child.fd, _READ_SIZE)
                except BlockingIOError:
                    continue
                except OSError as exc:  # EIO: the child is gone and the terminal closed
                    if exc.errno not in (errno.EIO, errno.EBADF):
                        raise
                    return
                if not data:
                    return
                await sink.send(Chunk("stdout", data, time.time()))

    async def wait(self, seconds: float) -> bool:
        with anyio.move_on_after(seconds):
            while self.returncode is None:  # noqa: ASYNC110 - a pty child's exit has no event to wait on
                await anyio.sleep(0.02)
        return self._returncode is not None

    async def shutdown(
        self,
        policy: ShutdownPolicy = ShutdownPolicy(),  # noqa: B008 - frozen
        interrupt: Callable[[], Awaitable[None]] | None = None,
    ) -> int | None:
        """The same ladder as for pipes (end of input is the EOF key here), then the terminal closed."""
        await climb_ladder(self, policy, interrupt)
        with anyio.CancelScope(shield=True):
            await self.containment.release()
        self._close_terminal()
        return self._returncode

    def _close_terminal(self) -> None:
        # Through ptyprocess's own file object, and marked closed: else its __del__ closes the fd
        # number again later, when it may belong to another run's terminal.  Not its close(): that
        # sleeps and signals a child that is gone already.
        if not self.child.closed:
            with contextlib.suppress(OSError):
                self.child.fileobj.close()
            self.child.closed = True

    def send_signal(self, sig: signal.Signals) -> None:
        self.containment.signal(sig)

    def _signal_group(self, sig: signal.Signals) -> None:
        self.containment.signal_group(sig)

    def _kill_all(self) -> None:
        self.containment.kill()

    def _reap(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.child.pid, flags)
        except ChildProcessError:
            self._returncode = self._returncode if self._returncode is not None else -1
            return
        if pid:
            self._returncode = os.waitstatus_to_exitcode(status)
