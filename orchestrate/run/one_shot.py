"""One turn per process, the prompt on stdin (`codex exec --json`, `cursor-agent -p`): write it, close
stdin, and let the process run its turn alone.  There is no channel back, so no live approvals."""

from __future__ import annotations

import signal

from ..errors import ConfigError
from ..executors.base import Executor
from ..wire.lines import WireLine
from ..wire.notes import Cwd, ResumedThread
from .driver import Driver

__all__ = ["PromptOnStdinDriver"]


class PromptOnStdinDriver(Driver[Executor]):
    async def start(self, prompt: str) -> None:
        if self.ctx.task.resume:
            self.ctx.note(ResumedThread(self.ctx.task.resume))
        self.ctx.note(Cwd(str(self.ctx.task.cwd)))
        # Both read stdin to EOF before they start (protocols/codex.md §3, cursor.md): write, then close.
        await self.ctx.process.write(prompt.encode())
        await self.end_input()
        # Never idle: the process ends by itself when its turn is over.

    reads_lines = False  # nothing to answer: exec has no channel back

    async def on_line(self, line: WireLine) -> None:
        pass

    async def send_message(self, text: str) -> None:
        raise ConfigError(
            f"{self.ctx.executor.name} runs one turn per process; start a new run that resumes it"
        )

    async def interrupt(self) -> None:
        # SIGINT is their interrupt: codex exec kills the running command and exits (no terminal event).
        self.ctx.process.send_signal(signal.SIGINT)
