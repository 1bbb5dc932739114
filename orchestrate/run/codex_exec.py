"""The `codex exec --json` driver: the prompt on stdin, then the process runs its one turn alone."""

from __future__ import annotations

import contextlib
import signal

from ..errors import ConfigError
from .driver import Driver

__all__ = ["CodexExecDriver"]


class CodexExecDriver(Driver):
    async def start(self, prompt: str) -> None:
        if self.ctx.task.resume:
            self.ctx.note({"type": "resumed_thread", "thread_id": self.ctx.task.resume})
        self.ctx.note({"type": "cwd", "cwd": str(self.ctx.task.cwd)})
        # exec reads stdin to EOF before it starts (protocols/codex.md §3): write, then close.
        await self.ctx.process.write(prompt.encode())
        await self.end_input()
        # Never idle: the process ends by itself when its turn is over.

    async def on_line(self, line: str) -> None:
        pass  # nothing to answer: exec has no channel back

    async def send_message(self, text: str) -> None:
        raise ConfigError("codex-exec runs one turn per process; start a new run that resumes this thread")

    async def interrupt(self) -> None:
        # SIGINT is exec's interrupt: it kills the running command and exits (with no terminal event).
        with contextlib.suppress(ProcessLookupError):
            self.ctx.process.process.send_signal(signal.SIGINT)
