"""The live parts of each protocol, tied by type: which executor class a driver speaks for, and the
driver.  Both are named by functions that import them when the protocol is chosen, not before: the
ACP driver pulls in the whole ACP schema package (over a second of imports) and the terminal one
pyte, which a Claude run must not wait for before its first write (bench/startup.py).  The wire and
the normalizer are the executor's own (``Executor.create_normalizer``; a line protocol's normalizer
owns its :class:`~orchestrate.wire.lines.JsonLinesWire`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import ConfigError
from ..executors.base import Executor
from .driver import Driver, DriverContext

if TYPE_CHECKING:
    from ..executors.acp import AcpExecutor
    from ..executors.claude_code import ClaudeCodeExecutor
    from ..executors.codex import CodexExecutor
    from ..executors.terminal import TerminalExecutor

__all__ = ["PROTOCOLS", "LiveProtocol", "driver_class", "start_driver"]

X = TypeVar("X", bound=Executor)


@dataclass(frozen=True)
class LiveProtocol(Generic[X]):
    """One protocol's live half: its driver, and the executor class that driver is written for."""

    executor: Callable[[], type[X]]
    driver: Callable[[], type[Driver[X]]]

    def start(self, ctx: DriverContext[Executor]) -> Driver[X]:
        """The driver for ``ctx``'s executor, which it receives typed as the class it speaks for."""
        wanted = self.executor()
        executor = ctx.executor
        if not isinstance(executor, wanted):  # a plugin naming a protocol its class does not speak
            raise ConfigError(
                f"executor {executor.name!r} ({type(executor).__name__}) names a protocol whose "
                f"driver is written for {wanted.__name__}"
            )
        typed = DriverContext(
            executor, ctx.task, ctx.process, ctx.approvals, ctx.task_group, ctx.note, ctx.session_id
        )
        return self.driver()(typed)


def _claude_executor() -> type[ClaudeCodeExecutor]:
    from ..executors.claude_code import ClaudeCodeExecutor

    return ClaudeCodeExecutor


def _claude_driver() -> type[Driver[ClaudeCodeExecutor]]:
    from .claude import ClaudeDriver

    return ClaudeDriver


def _codex_executor() -> type[CodexExecutor]:
    from ..executors.codex import CodexExecutor

    return CodexExecutor


def _codex_driver() -> type[Driver[CodexExecutor]]:
    from .codex import CodexDriver

    return CodexDriver


def _acp_executor() -> type[AcpExecutor]:
    from ..executors.acp import AcpExecutor

    return AcpExecutor


def _acp_driver() -> type[Driver[AcpExecutor]]:
    from .acp import AcpDriver

    return AcpDriver


def _terminal_executor() -> type[TerminalExecutor]:
    from ..executors.terminal import TerminalExecutor

    return TerminalExecutor


def _terminal_driver() -> type[Driver[TerminalExecutor]]:
    from .terminal import TerminalDriver

    return TerminalDriver


def _any_executor() -> type[Executor]:
    return Executor


def _one_shot_driver() -> type[Driver[Executor]]:
    from .one_shot import PromptOnStdinDriver

    return PromptOnStdinDriver


PROTOCOLS: dict[str, LiveProtocol[Any]] = {
    "stream-json": LiveProtocol(_claude_executor, _claude_driver),
    "jsonrpc": LiveProtocol(_codex_executor, _codex_driver),
    "prompt-on-stdin": LiveProtocol(_any_executor, _one_shot_driver),
    "acp": LiveProtocol(_acp_executor, _acp_driver),
    "terminal": LiveProtocol(_terminal_executor, _terminal_driver),
}
"""By the executor's ``driver``, else its ``protocol`` (the names it is listed with)."""


def start_driver(ctx: DriverContext[Executor]) -> Driver[Any]:
    """The live driver of ``ctx``'s executor: the one it names, else the one of its protocol."""
    return _protocol(ctx.executor).start(ctx)


def driver_class(executor: Executor) -> type[Driver[Any]]:
    """The class of the driver :func:`start_driver` would start for ``executor``."""
    return _protocol(executor).driver()


def _protocol(executor: Executor) -> LiveProtocol[Any]:
    key = executor.driver or executor.protocol
    protocol = PROTOCOLS.get(key)
    if protocol is None:
        raise ConfigError(f"no live driver {key!r} for executor {executor.name!r}")
    return protocol
