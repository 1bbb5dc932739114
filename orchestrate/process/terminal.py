"""Commands run on an agent's behalf (ACP ``terminal/*``): output kept within a byte limit, exit
status, kill.  Each runs in its own process group, so killing it kills what it started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, Process, TaskGroup

from ..errors import SpawnError

__all__ = ["ManagedCommand"]

_READ_SIZE = 1 << 16


@dataclass
class ManagedCommand:
    """A running command whose stdout and stderr are collected together, keeping the last
    ``output_limit`` bytes (cut at a character boundary, as ACP asks)."""

    process: Process
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
        try:
            process = await anyio.open_process(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
            )
        except OSError as exc:
            raise SpawnError(argv, exc.strerror or str(exc)) from exc
        command = cls(process, output_limit)
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
        """SIGKILL to its whole process group (idempotent)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    async def _collect(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        try:
            await self._drain(stream)
            await self.process.wait()
        finally:
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
