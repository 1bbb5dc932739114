"""Scenarios: what the scripted model answers, turn by turn, instead of magic words in the prompt.

A scenario file is JSON (or the same in YAML)::

    {"steps": [
      {"thinking": "let me look", "text": "I'll run it.",
       "tool": {"name": "Bash", "input": {"command": "ls"}}},
      {"text": "The command said: {tool_result}"},
      {"error": {"status": 529, "type": "overloaded_error", "message": "try later"}},
      {"text": "slow answer", "delay": 0.5}
    ]}

Each request of the main conversation (one that offers tools) takes the next step; requests without
tools (titles, summaries, model checks) get a short harmless answer and take no step.  In ``text``,
``{tool_result}`` becomes the content of the tool result the request carries, so a test can see what
the CLI sent back (a denial message, a command's output).  When the steps run out, the model says so.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from ..errors import ConfigError

__all__ = ["Scenario", "Step", "ToolCall", "load_data"]


def load_data(path: Path) -> Any:
    """A JSON or YAML file's data (YAML for ``.yaml`` / ``.yml``); a clear ConfigError otherwise."""
    try:
        raw = path.read_bytes()
        if path.suffix in (".yaml", ".yml"):
            return yaml.safe_load(raw)
        return orjson.loads(raw)
    except (OSError, orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Step:
    text: str | None = None
    thinking: str | None = None
    tools: tuple[ToolCall, ...] = ()
    error: dict[str, Any] | None = None
    delay: float = 0.0

    @classmethod
    def parse(cls, raw: Any, n: int) -> Step:
        if not isinstance(raw, dict):
            raise ConfigError(f"scenario step {n} must be an object")
        unknown = set(raw) - {"text", "thinking", "tool", "tools", "error", "delay"}
        if unknown:
            raise ConfigError(f"scenario step {n}: unknown keys {sorted(unknown)}")
        calls = [raw["tool"]] if "tool" in raw else list(raw.get("tools") or [])
        tools = []
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise ConfigError(f"scenario step {n}: a tool needs a name and an input object")
            tools.append(ToolCall(call["name"], dict(call.get("input") or {})))
        error = raw.get("error")
        if error is not None and not (isinstance(error, dict) and isinstance(error.get("status"), int)):
            raise ConfigError(f"scenario step {n}: error needs an integer status")
        return cls(
            text=raw.get("text"),
            thinking=raw.get("thinking"),
            tools=tuple(tools),
            error=error,
            delay=float(raw.get("delay") or 0.0),
        )

    def render_text(self, tool_result: str | None) -> str | None:
        if self.text is None:
            return None
        return self.text.replace("{tool_result}", tool_result or "")


@dataclass
class Scenario:
    steps: list[Step]
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_obj(cls, raw: Any) -> Scenario:
        steps = raw.get("steps") if isinstance(raw, dict) else raw
        if not isinstance(steps, list):
            raise ConfigError('a scenario is {"steps": [...]}')
        return cls([Step.parse(s, n) for n, s in enumerate(steps)])

    @classmethod
    def load(cls, path: Path) -> Scenario:
        """A scenario from a JSON or YAML file (by its suffix)."""
        return cls.from_obj(load_data(path))

    def take(self) -> Step:
        """The next step (thread-safe: the CLI may send requests concurrently)."""
        return self.take_numbered()[0]

    def take_numbered(self) -> tuple[Step, int]:
        """The next step and its number (-1 once the steps have run out)."""
        with self._lock:
            if self._next >= len(self.steps):
                return Step(text="(the scripted scenario has no more steps)"), -1
            self._next += 1
            return self.steps[self._next - 1], self._next - 1

    @property
    def remaining(self) -> int:
        return len(self.steps) - self._next
