"""What the run needs of an agent process, whether it talks over pipes or through a terminal."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import Protocol

from anyio.streams.memory import MemoryObjectSendStream

from .pipes import Chunk, ProcessSpec, ShutdownPolicy

__all__ = ["AgentIO"]


class AgentIO(Protocol):
    spec: ProcessSpec
    on_write: Callable[[bytes, float], None] | None

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    @property
    def stderr_tail(self) -> str: ...

    async def write(self, data: bytes) -> None:
        """Send bytes to the agent (stdin, or keys); ProcessExitedError when it is gone."""

    async def close_stdin(self) -> None:
        """Tell the agent no more input comes."""

    async def pump(self, sink: MemoryObjectSendStream[Chunk]) -> None:
        """Everything the agent prints, as chunks, until it closes its output; then close ``sink``."""

    async def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the agent to exit; True when it did."""

    def send_signal(self, sig: signal.Signals) -> None:
        """Signal the agent process itself."""

    async def shutdown(
        self, policy: ShutdownPolicy = ..., interrupt: Callable[[], Awaitable[None]] | None = None
    ) -> int | None:
        """Stop the agent and every process of its group, bounded; returns its exit code."""
