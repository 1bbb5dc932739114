"""Executors by name: the built-ins, plus any installed under the ``orchestrate.executors`` entry point."""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Iterable

from .errors import ConfigError, UnknownExecutorError
from .executors.base import Executor, ExecutorOptions

__all__ = ["ENTRY_POINT_GROUP", "Registry", "default_registry", "get_executor", "register"]

ENTRY_POINT_GROUP = "orchestrate.executors"
_REQUIRED = ("name", "protocol", "program", "capabilities")


class Registry:
    def __init__(self, blocked: Iterable[str] = ()) -> None:
        self._classes: dict[str, type[Executor]] = {}
        self.sources: dict[str, str] = {}
        self.blocked = set(blocked)
        self._loaded_entry_points = False

    def register(self, cls: type[Executor], source: str = "builtin") -> type[Executor]:
        missing = [a for a in _REQUIRED if not hasattr(cls, a)]
        if missing or not (isinstance(cls, type) and issubclass(cls, Executor)):
            raise ConfigError(f"{cls!r} is not an Executor (missing {', '.join(missing) or 'base class'})")
        if cls.name in self.blocked or cls.name in self._classes:
            return cls  # first registration wins; built-ins cannot be shadowed
        self._classes[cls.name] = cls
        self.sources[cls.name] = source
        return cls

    def load_entry_points(self) -> None:
        if self._loaded_entry_points:
            return
        self._loaded_entry_points = True
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in self._classes or ep.name in self.blocked:
                continue
            try:
                cls = ep.load()
                self.register(cls, source=ep.dist.name if ep.dist else ep.value)
            except Exception as exc:  # one broken plugin must not take the others down
                warnings.warn(
                    f"executor plugin {ep.name!r} failed to load: {exc}", RuntimeWarning, stacklevel=2
                )

    def names(self) -> list[str]:
        self.load_entry_points()
        return sorted(self._classes)

    def get(self, name: str) -> type[Executor]:
        self.load_entry_points()
        try:
            return self._classes[name]
        except KeyError:
            raise UnknownExecutorError(name, self._classes) from None

    def create(self, name: str, options: ExecutorOptions | None = None) -> Executor:
        return self.get(name)(options)


def _builtins() -> Registry:
    from .executors.acp import AcpExecutor, GeminiExecutor, QwenExecutor
    from .executors.claude_code import ClaudeCodeExecutor
    from .executors.codex import CodexExecExecutor, CodexExecutor
    from .executors.cursor import CursorExecutor
    from .executors.terminal import ClaudeCodeTuiExecutor, TerminalExecutor

    reg = Registry()
    for cls in (
        ClaudeCodeExecutor,
        CodexExecutor,
        CodexExecExecutor,
        GeminiExecutor,
        QwenExecutor,
        AcpExecutor,
        CursorExecutor,
        TerminalExecutor,
        ClaudeCodeTuiExecutor,
    ):
        reg.register(cls)
    return reg


default_registry = _builtins()
register = default_registry.register


def get_executor(name: str, options: ExecutorOptions | None = None) -> Executor:
    """An executor instance from the default registry; UnknownExecutorError lists the known names."""
    return default_registry.create(name, options)
