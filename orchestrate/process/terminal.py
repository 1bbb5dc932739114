"""Commands run on an agent's behalf (ACP ``terminal/*``): output kept within a byte limit, exit
status, kill.  Each is contained like an agent (containment.py), so killing it kills everything it
started, and it dies with us."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, Process, TaskGroup

from .containment import Containment
from .pipes import open_contained

__all__ = ["ManagedCommand"]

_READ_SIZE = 1 << 16


@dataclass
class ManagedCommand:
    """A running command whose stdout and stderr are collected together, keeping the last
    ``output_limit`` bytes (cut at a character boundary, as ACP asks)."""

    process: Process
    containment: Containment
    output_limit: int | None
    _output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    _exited: anyio.Event = field(default_factory=anyio.Event)

    @classmethod
    async def start(
        cls,
        task_group: TaskGroup,
        argv: list[str],
        cwd: Path,
        env: Mapping[str, str],
        output_limit: int | None,
    ) -> ManagedCommand:
        process, contained = await open_contained(
            argv, cwd, dict(env), stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        command = cls(process, contained, output_limit)
        task_group.start_soon(command._collect)
        return command

    @property
    def output(self) -> str:
        return self._output.decode("utf-8", "replace")

    @property
    def exit_status(self) -> tuple[int | None, str | None] | None:
        """(exit code, signal name) once it has exited, else None."""
        code = self.process.returncode
        if code is None or not self._exited.is_set():
            return None
        if code < 0:
            return None, signal.Signals(-code).name
        return code, None

    async def wait(self) -> tuple[int | None, str | None]:
        await self._exited.wait()
        status = self.exit_status
        assert status is not None
        return status

    def kill(self) -> None:
        """SIGKILL to everything it started (idempotent)."""
        self.containment.kill()

    async def _collect(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        try:
            await self._drain(stream)
            await self.process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await self.containment.release()
                with anyio.move_on_after(5):
                    await self.process.aclose()
            self._exited.set()

    async def _drain(self, stream: ByteReceiveStream) -> None:
        while True:
            try:
                data = await stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            self._output += data
            self._trim()

    def _trim(self) -> None:
        if self.output_limit is None or len(self._output) <= self.output_limit:
            return
        cut = len(self._output) - self.output_limit
        # Never start inside a UTF-8 sequence: skip continuation bytes (10xxxxxx).
        while cut < len(self._output) and self._output[cut] & 0xC0 == 0x80:
            cut += 1
        del self._output[:cut]
        self.truncated = True
