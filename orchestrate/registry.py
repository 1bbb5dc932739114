"""Executors by name: the built-ins, plus any installed under the ``orchestrate.executors`` entry point."""

from __future__ import annotations

from .errors import ConfigError, UnknownExecutorError
from .executors.base import Executor
from .lazy import import_module

# (typing's TYPE_CHECKING would import typing, ~3 ms, before `orchestrate run` spawns its agent;
# mypy takes any TYPE_CHECKING as true)
TYPE_CHECKING = False
if TYPE_CHECKING:  # not loaded by a lookup: `orchestrate run` starts its agent before pydantic loads
    from collections.abc import Iterable

    from .executors.options import ExecutorOptions

__all__ = ["ENTRY_POINT_GROUP", "Registry", "default_registry", "get_executor", "register"]

ENTRY_POINT_GROUP = "orchestrate.executors"
_REQUIRED = ("name", "protocol", "program", "capabilities")


class Registry:
    def __init__(self, blocked: Iterable[str] = ()) -> None:
        self._classes: dict[str, type[Executor]] = {}
        # Built-ins known by name and imported when first asked for: an executor's module pulls in
        # its normalizer and protocol (pyte for the terminal ones), which other runs do not need.
        self._lazy: dict[str, str] = {}  # name -> "module:Class"
        self.sources: dict[str, str] = {}
        self.blocked = set(blocked)
        self._loaded_entry_points = False

    def register(self, cls: type[Executor], source: str = "builtin") -> type[Executor]:
        missing = [a for a in _REQUIRED if not hasattr(cls, a)]
        if missing or not (isinstance(cls, type) and issubclass(cls, Executor)):
            raise ConfigError(f"{cls!r} is not an Executor (missing {', '.join(missing) or 'base class'})")
        if cls.name in self.blocked or cls.name in self._classes or cls.name in self._lazy:
            return cls  # first registration wins; built-ins cannot be shadowed
        self._classes[cls.name] = cls
        self.sources[cls.name] = source
        return cls

    def register_lazy(self, name: str, target: str, source: str = "builtin") -> None:
        """Register the executor ``name`` as ``"module:Class"``, imported on first use."""
        if name not in self.blocked and name not in self._classes and name not in self._lazy:
            self._lazy[name] = target
            self.sources[name] = source

    def load_entry_points(self) -> None:
        if self._loaded_entry_points:
            return
        self._loaded_entry_points = True
        import importlib.metadata  # only here: it pulls in email and zipfile, a run by name needs none
        import warnings

        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in self._classes or ep.name in self._lazy or ep.name in self.blocked:
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
        return sorted({*self._classes, *self._lazy})

    def get(self, name: str) -> type[Executor]:
        if name in self._lazy:
            return self._import(name)
        if name not in self._classes:
            self.load_entry_points()  # only when a name is not a built-in
        try:
            return self._classes[name]
        except KeyError:
            raise UnknownExecutorError(name, {*self._classes, *self._lazy}) from None

    def _import(self, name: str) -> type[Executor]:
        module, _, attr = self._lazy[name].partition(":")
        cls: type[Executor] = getattr(import_module(module, __package__), attr)
        if cls.name != name:
            raise ConfigError(f"built-in executor {name!r} imports as {cls.name!r}")
        del self._lazy[name]
        self._classes[name] = cls
        return cls

    def create(self, name: str, options: ExecutorOptions | None = None) -> Executor:
        return self.get(name)(options)


_BUILTINS = {
    "claude-code": ".executors.claude_code:ClaudeCodeExecutor",
    "codex": ".executors.codex:CodexExecutor",
    "codex-exec": ".executors.codex:CodexExecExecutor",
    "gemini": ".executors.acp:GeminiExecutor",
    "qwen": ".executors.acp:QwenExecutor",
    "acp": ".executors.acp:AcpExecutor",
    "opencode": ".executors.opencode:OpenCodeExecutor",
    "copilot": ".executors.copilot:CopilotExecutor",
    "droid": ".executors.droid:DroidExecutor",
    "claude-code-acp": ".executors.zed:ClaudeCodeAcpExecutor",
    "codex-acp": ".executors.zed:CodexAcpExecutor",
    "cursor-acp": ".executors.cursor_acp:CursorAcpExecutor",
    "cursor": ".executors.cursor:CursorExecutor",
    "terminal": ".executors.terminal:TerminalExecutor",
    "claude-code-tui": ".executors.terminal:ClaudeCodeTuiExecutor",
}


def _builtins() -> Registry:
    reg = Registry()
    for name, target in _BUILTINS.items():
        reg.register_lazy(name, target)
    return reg


default_registry = _builtins()
register = default_registry.register


def get_executor(name: str, options: ExecutorOptions | None = None) -> Executor:
    """An executor instance from the default registry; UnknownExecutorError lists the known names."""
    return default_registry.create(name, options)
