"""The embedded default job: the real Claude Code CLI against the scripted model, in a scratch dir."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib.resources import files

import orjson

from ..task import Task
from .model_server import ScriptedModelServer
from .offline import Scratch, claude_offline_env
from .scenario import Scenario

__all__ = ["DEMO_PROMPT", "demo_task"]

DEMO_PROMPT = "Write a hello-world script in Python and run it."


@contextlib.contextmanager
def demo_task(timeout: float = 120) -> Iterator[Task]:
    """A task whose model is scripted (no API key, no network); the scratch dir goes away after."""
    raw = files("orchestrate.testing").joinpath("scenarios/demo.json").read_text(encoding="utf-8")
    with Scratch.create(prefix="orchestrate-demo-") as scratch:
        scenario = Scenario.from_obj(orjson.loads(raw.replace("{work}", str(scratch.work))))
        with ScriptedModelServer(scenario) as server:
            yield Task(
                prompt=DEMO_PROMPT, cwd=scratch.work, env=claude_offline_env(server, scratch), timeout=timeout
            )
