"""Which driver speaks which executor's protocol."""

from __future__ import annotations

from ..errors import ConfigError
from ..executors.base import Executor
from .driver import Driver

__all__ = ["driver_for"]


def driver_for(executor: Executor) -> type[Driver]:
    from .claude import ClaudeDriver
    from .codex import CodexDriver
    from .codex_exec import CodexExecDriver

    drivers: dict[str, type[Driver]] = {
        "stream-json": ClaudeDriver,
        "jsonrpc": CodexDriver,
        "jsonl": CodexExecDriver,
    }
    try:
        return drivers[executor.protocol]
    except KeyError:
        raise ConfigError(f"no live driver for protocol {executor.protocol!r}") from None
