"""Testing kit: a scripted model server real CLIs can be pointed at, and its scenarios."""

from __future__ import annotations

from .model_server import ScriptedModelServer
from .scenario import Scenario, Step, ToolCall

__all__ = ["Scenario", "ScriptedModelServer", "Step", "ToolCall"]
