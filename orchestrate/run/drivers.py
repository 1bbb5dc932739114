"""Which driver speaks which executor's protocol."""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from ..executors.base import Executor
from .driver import Driver

__all__ = ["driver_for"]

# protocol -> (module under orchestrate.run, class).  Imported only when chosen: the ACP driver
# pulls in the whole ACP schema package (over a second of imports), which a Claude run must not
# wait for before its first write.
_DRIVERS = {
    "stream-json": ("claude", "ClaudeDriver"),
    "jsonrpc": ("codex", "CodexDriver"),
    "prompt-on-stdin": ("one_shot", "PromptOnStdinDriver"),
    "acp": ("acp", "AcpDriver"),
    "terminal": ("terminal", "TerminalDriver"),
}


def driver_for(executor: Executor) -> type[Driver]:
    """The executor's own driver if it names one, else the driver of its protocol."""
    key = executor.driver or executor.protocol
    try:
        module, name = _DRIVERS[key]
    except KeyError:
        raise ConfigError(f"no live driver {key!r} for executor {executor.name!r}") from None
    cls: type[Driver] = getattr(importlib.import_module(f"{__package__}.{module}"), name)
    return cls
