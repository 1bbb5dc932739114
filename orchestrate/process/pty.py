"""An agent in a pseudo-terminal, for CLIs that only have a text UI.

ptyprocess spawns the child (in a new session, so it leads its own process group) and sets the
window size; nothing here blocks the event loop: the master side is read with ``anyio.wait_readable``
and non-blocking ``os.read``.  It offers what the run needs of an agent process (see pipes.py):
output comes out of :meth:`pump` as ``stdout`` chunks (a terminal merges stderr in), keys go in
through :meth:`write`.
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

from ..errors import ProcessExitedError, SpawnError
from .pipes import Chunk, ProcessSpec, ShutdownPolicy, climb_ladder

__all__ = ["PtyAgentProcess"]

_READ_SIZE = 1 << 16
DEFAULT_SIZE = (50, 140)  # rows, columns: room for a TUI's whole answer without scrolling
EOF_KEY = b"\x04"


@dataclass
class PtyAgentProcess:
    child: PtyProcess
    spec: ProcessSpec
    on_write: Callable[[bytes, float], None] | None = None
    _returncode: int | None = None
    _write_lock: anyio.Lock = field(default_factory=anyio.Lock)

    @classmethod
    async def spawn(cls, spec: ProcessSpec, size: tuple[int, int] = DEFAULT_SIZE) -> PtyAgentProcess:
        env = {**spec.env, "TERM": spec.env.get("TERM", "xterm-256color")}
        try:
            child = PtyProcess.spawn(spec.argv, cwd=str(spec.cwd), env=env, dimensions=size)
        except (OSError, FileNotFoundError) as exc:
            raise SpawnError(spec.argv, str(exc)) from exc
        os.set_blocking(child.fd, False)
        return cls(child, spec)

    @property
    def pid(self) -> int:
        return int(self.child.pid)

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
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def _reap(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:
            self._returncode = self._returncode if self._returncode is not None else -1
            return
        if pid:
            self._returncode = os.waitstatus_to_exitcode(status)
