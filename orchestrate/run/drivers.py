"""Which driver speaks which executor's protocol."""

from __future__ import annotations

from ..errors import ConfigError
from ..executors.base import Executor
from .driver import Driver

__all__ = ["driver_for"]


def driver_for(executor: Executor) -> type[Driver]:
    """The executor's own driver if it names one, else the driver of its protocol."""
    from .acp import AcpDriver
    from .claude import ClaudeDriver
    from .codex import CodexDriver
    from .one_shot import PromptOnStdinDriver
    from .terminal import TerminalDriver

    drivers: dict[str, type[Driver]] = {
        "stream-json": ClaudeDriver,
        "jsonrpc": CodexDriver,
        "prompt-on-stdin": PromptOnStdinDriver,
        "acp": AcpDriver,
        "terminal": TerminalDriver,
    }
    key = executor.driver or executor.protocol
    try:
        return drivers[key]
    except KeyError:
        raise ConfigError(f"no live driver {key!r} for executor {executor.name!r}") from None
