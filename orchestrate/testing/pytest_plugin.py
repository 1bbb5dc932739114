"""A pytest plugin for projects that build on orchestrate (registered under ``pytest11``, so it loads
wherever orchestrate is installed).  Its fixtures are plain functions, no async test runner needed:

``orchestrate_replay(path, executor)``
    Replays a recorded run (our raw log, or a plain stdout capture of the CLI) through the executor's
    normalizer and returns the entries, the patches and the outcome the agent reported.

``scripted_agent(executor, steps, prompt=..., approvals=..., files=..., **task)``
    Starts the scripted model server with ``steps``, runs the real CLI against it in a scratch home
    and working directory, and returns the run's result with the server's request log.  Skips the
    test when the CLI is not installed (set ``ORCHESTRATE_REQUIRE_REAL_CLIS=1`` to fail instead).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import orjson
import pytest

from ..approvals.base import ApprovalService
from ..entries import EntryPatch, NormalizedEntry
from ..executors.base import ExecutorOptions
from ..registry import default_registry
from ..replay import normalizer_for_file, replay
from ..run import Run, RunResult
from ..task import Task
from .cases import offline_env
from .model_server import ScriptedModelServer
from .offline import SCRATCH_PLACEHOLDER, Scratch
from .scenario import Scenario

__all__ = ["AgentRun", "Replayed", "orchestrate_replay", "scripted_agent"]


@dataclass
class Replayed:
    entries: list[NormalizedEntry]
    patches: list[EntryPatch]
    outcome: str | None


@dataclass
class AgentRun:
    result: RunResult
    requests: list[dict[str, Any]]
    workdir: Path
    entries: list[NormalizedEntry] = field(init=False)

    def __post_init__(self) -> None:
        self.entries = self.result.entries


class ReplayFixture(Protocol):
    def __call__(self, path: str | Path, executor: str) -> Replayed: ...


class AgentFixture(Protocol):
    def __call__(
        self,
        executor: str,
        steps: list[dict[str, Any]],
        *,
        prompt: str = ...,
        approvals: ApprovalService | None = ...,
        files: dict[str, str] | None = ...,
        options: dict[str, Any] | None = ...,
        **task: Any,
    ) -> AgentRun: ...


@pytest.fixture
def orchestrate_replay() -> ReplayFixture:
    def run(path: str | Path, executor: str) -> Replayed:
        normalizer = normalizer_for_file(Path(path), default_registry.create(executor))
        patches = list(replay(Path(path), normalizer))
        return Replayed(list(normalizer.entries), patches, normalizer.outcome)

    return run


@pytest.fixture
def scripted_agent() -> Iterator[AgentFixture]:
    scratches: list[Scratch] = []

    def run(
        executor: str,
        steps: list[dict[str, Any]],
        *,
        prompt: str = "do the task",
        approvals: ApprovalService | None = None,
        files: dict[str, str] | None = None,
        options: dict[str, Any] | None = None,
        **task: Any,
    ) -> AgentRun:
        agent = default_registry.create(executor, ExecutorOptions(**(options or {})))
        available = anyio.run(agent.check_availability)
        if not available.installed:
            if os.environ.get("ORCHESTRATE_REQUIRE_REAL_CLIS") == "1":
                pytest.fail(f"{executor} is required but not available: {available.reason}")
            pytest.skip(f"{executor} is not installed: {available.reason}")
        scratch = Scratch.create(prefix=f"pytest-{executor}-")
        scratches.append(scratch)
        for name, text in (files or {}).items():
            (scratch.work / name).write_text(text)
        scripted = [_placeholders(step, scratch) for step in steps]
        with ScriptedModelServer(Scenario.from_obj({"steps": scripted})) as server:
            env = {**offline_env(executor, server, scratch), **task.pop("env", {})}
            job = Task(prompt=prompt, cwd=scratch.work, env=env, **{"timeout": 120, **task})
            result = anyio.run(_run, Run(agent, job, approvals))
            return AgentRun(result, list(server.requests), scratch.work)

    yield run
    for scratch in scratches:
        scratch.__exit__(None, None, None)


async def _run(run: Run) -> RunResult:
    async with run:
        return await run.wait()


def _placeholders(step: dict[str, Any], scratch: Scratch) -> dict[str, Any]:
    return dict(orjson.loads(orjson.dumps(step).decode().replace(SCRATCH_PLACEHOLDER, str(scratch.root))))
