"""Commands run on an agent's behalf (ACP ``terminal/*``), each spawned and stopped by the process
layer, so whatever contains an agent's processes contains these too, and none outlives its session.

Output (stdout and stderr together) keeps the last bytes within a limit, cut at a character
boundary as ACP asks; a command is waited for by its exit, not by the end of its output, since a
background process it started may hold the pipe open for ever.
"""

from __future__ import annotations

import itertools
import math
import re
import shlex
import signal
from collections.abc import Mapping
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from ..errors import OrchestrateError
from ..process.pipes import AgentProcess, Chunk, ProcessSpec, ShutdownPolicy

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "MAX_OUTPUT_LIMIT",
    "SAFE_ENV",
    "Terminal",
    "Terminals",
    "TooManyTerminalsError",
    "checked_env",
    "judged_command",
]

DEFAULT_OUTPUT_LIMIT = 1024 * 1024
"""Output kept when the agent names no ``outputByteLimit``."""
MAX_OUTPUT_LIMIT = 16 * 1024 * 1024
"""A larger ``outputByteLimit`` is lowered to this."""
MAX_TERMINALS = 64
"""Terminals alive at once in one session (a released one no longer counts)."""
_KILL = ShutdownPolicy(interrupt_grace=0.0, stdin_grace=0.0, term_grace=1.0)
_LATE_OUTPUT_GRACE = 0.2  # after the exit, for output the command wrote just before it


class TooManyTerminalsError(OrchestrateError):
    pass


class Terminal:
    """One command: its output tail, its exit, and kill."""

    def __init__(self, process: AgentProcess, output_limit: int) -> None:
        self.process = process
        self.output_limit = output_limit
        self._dropped = False
        self._output = bytearray()
        self._exited = anyio.Event()
        self._drained = anyio.Event()
        self._stopped = anyio.Event()

    @classmethod
    async def start(
        cls,
        task_group: TaskGroup,
        argv: list[str],
        cwd: Path,
        env: Mapping[str, str],
        output_limit: int | None,
    ) -> Terminal:
        """Spawn ``argv`` (SpawnError if it cannot start); it lives until killed or it ends, and is
        killed with all it started when ``task_group`` is cancelled."""
        limit = DEFAULT_OUTPUT_LIMIT if output_limit is None else min(output_limit, MAX_OUTPUT_LIMIT)
        process = await AgentProcess.spawn(ProcessSpec(list(argv), cwd, dict(env)))
        await process.close_stdin()  # a command that reads its input sees the end at once
        terminal = cls(process, max(limit, 0))
        task_group.start_soon(terminal._run)
        return terminal

    @property
    def output(self) -> str:
        return bytes(self._tail()).decode("utf-8", "replace")

    @property
    def truncated(self) -> bool:
        """Whether output was dropped from the start to keep within the limit."""
        return self._dropped or len(self._output) > self.output_limit

    @property
    def exit_status(self) -> tuple[int | None, str | None] | None:
        """(exit code, signal name) once it has exited, else None."""
        code = self.process.returncode
        if code is None or not self._exited.is_set():
            return None
        if code < 0:
            try:
                return None, signal.Signals(-code).name
            except ValueError:
                return None, f"SIG{-code}"
        return code, None

    async def wait(self) -> tuple[int | None, str | None]:
        """Its exit status, once the command itself has exited (not whatever it left behind),
        with the output it wrote before exiting."""
        await self._exited.wait()
        with anyio.move_on_after(_LATE_OUTPUT_GRACE):
            await self._drained.wait()
        status = self.exit_status
        assert status is not None
        return status

    def kill(self) -> None:
        """Stop it and everything it started, by the process layer's ladder (idempotent)."""
        self._stopped.set()

    async def _run(self) -> None:
        send, receive = anyio.create_memory_object_stream[Chunk](4)  # bounded: the pipe waits for us
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.process.pump, send)
                tg.start_soon(self._watch_exit)
                tg.start_soon(self._collect, receive)
                await self._stopped.wait()
                tg.cancel_scope.cancel()
        finally:
            # Killed, released, or the session is over (this task was cancelled): the ladder, shielded.
            await self.process.shutdown(_KILL)
            self._exited.set()
            self._drained.set()

    async def _watch_exit(self) -> None:
        await self.process.wait(math.inf)
        self._exited.set()

    async def _collect(self, receive: anyio.abc.ObjectReceiveStream[Chunk]) -> None:
        async with receive:
            async for chunk in receive:
                self._keep(chunk.data)
        self._drained.set()

    def _keep(self, data: bytes) -> None:
        self._output += data
        # Trim only once the buffer holds twice the limit, so keeping the tail costs linear time.
        if len(self._output) > 2 * self.output_limit + len(data):
            self._output = self._tail()
            self._dropped = True

    def _tail(self) -> bytearray:
        if len(self._output) <= self.output_limit:
            return self._output
        cut = len(self._output) - self.output_limit
        # Never start inside a UTF-8 sequence: skip continuation bytes (10xxxxxx).
        while cut < len(self._output) and self._output[cut] & 0xC0 == 0x80:
            cut += 1
        return self._output[cut:]


class Terminals:
    """A session's terminals, by id.  Ids come from a counter, so a released id never names
    another command; ``close`` stops them all."""

    def __init__(self) -> None:
        self._live: dict[str, Terminal] = {}
        self._ids = itertools.count(1)

    async def create(
        self,
        task_group: TaskGroup,
        argv: list[str],
        cwd: Path,
        env: Mapping[str, str],
        output_limit: int | None,
    ) -> str:
        if len(self._live) >= MAX_TERMINALS:
            raise TooManyTerminalsError(f"{MAX_TERMINALS} terminals are open: release one first")
        terminal = await Terminal.start(task_group, argv, cwd, env, output_limit)
        terminal_id = f"term_{next(self._ids)}"
        self._live[terminal_id] = terminal
        return terminal_id

    def get(self, terminal_id: str) -> Terminal | None:
        return self._live.get(terminal_id)

    def release(self, terminal_id: str) -> bool:
        terminal = self._live.pop(terminal_id, None)
        if terminal is not None:
            terminal.kill()
        return terminal is not None

    def close(self) -> None:
        for terminal in self._live.values():
            terminal.kill()
        self._live.clear()


# Variables that only change how output looks, never what runs.  Any other variable the agent asks
# for (PATH, LD_*, GIT_*, BASH_ENV, ENV, PYTHON*, NODE_OPTIONS, IFS, PS4, PROMPT_COMMAND, PAGER, ...)
# is shown in the command line that is judged, as an assignment in front of it.
SAFE_ENV = frozenset(
    {"TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "COLUMNS", "LINES"}
    | {"LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "TZ"}
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A safe variable is safe only with a plain value: LC_ALL=/tmp/x loads locale data from a path,
# LANGUAGE=../../x gettext catalogs (translated format strings), TERM=../x a terminfo file.
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.,:@+=-]*")


def judged_command(command: str, args: list[str] | None, env: Mapping[str, str]) -> str:
    """The command line a person or a policy judges: every variable not on the safe list in front
    of it, as the shell would write it (``PATH=/tmp/x git status``), so no rule that allows
    ``git status`` allows this."""
    line = shlex.join([command, *args]) if args else command
    shown = [
        f"{name}={shlex.quote(value)}"
        for name, value in env.items()
        if name not in SAFE_ENV or not _PLAIN_VALUE.fullmatch(value)
    ]
    return " ".join([*shown, line])


def checked_env(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The agent's variables, refused (ValueError) when a name could not be shown as an assignment
    or a value could not reach the command as it was shown."""
    env: dict[str, str] = {}
    for name, value in pairs:
        if not _NAME.fullmatch(name):
            raise ValueError(f"environment variable name {name!r} is not a valid name")
        if "\0" in value:
            raise ValueError(f"environment variable {name} holds a NUL character")
        env[name] = value
    return env
