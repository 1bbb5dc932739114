"""Recorded cases: a scenario for the scripted model plus how the run is driven, as a JSON file.

    {
      "prompt": "please do the task",
      "steps": [...],                       # the scripted model's turns (scenario.py)
      "approvals": "auto",                  # auto | deny | deny-interrupt
      "files": {"notes.txt": "alpha\\n"},    # created in the working directory first
      "options": {"sandbox": "workspace-write"},
      "during": "follow_up",                # follow_up | interrupt_mid_stream | interrupt_when_running
      "follow_up": "and now say it again",
      "resume": "missing-session-id",       # resume this id ...
      "prelude": {"prompt": "...", "steps": [...]}   # ... or the thread a first, unrecorded run made
    }

``/scratch`` in steps stands for the scratch root, so cases can name files in the working directory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson

from ..approvals import ApprovalDecision, ApprovalRequest, ApprovalService, AutoApprove, AutoDeny
from ..entries import NormalizedEntry, ToolUse
from ..errors import ConfigError
from ..executors.base import ExecutorOptions
from ..registry import default_registry
from ..run import Run, RunResult
from ..task import Task
from .model_server import ScriptedModelServer
from .offline import (
    SCRATCH_PLACEHOLDER,
    Scratch,
    claude_offline_env,
    codex_offline_env,
    copilot_offline_env,
    droid_offline_env,
    gemini_offline_env,
    opencode_offline_env,
    qwen_offline_env,
)
from .scenario import Scenario, load_data

__all__ = ["Case", "offline_env", "run_case"]

During = Callable[[Run, "Case"], Awaitable[None]]


class DenyAndInterrupt:
    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision.deny("stop right there", interrupt=True)


APPROVALS: dict[str, Callable[[], ApprovalService]] = {
    "auto": AutoApprove,
    "deny": lambda: AutoDeny("not in this run"),
    "deny-interrupt": DenyAndInterrupt,
}


@dataclass
class Case:
    steps: list[Any]
    prompt: str = "please do the task"
    approvals: str = "auto"
    files: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    during: str | None = None
    follow_up: str = "and now say it again"
    resume: str | None = None
    prelude: dict[str, Any] | None = None

    @classmethod
    def load(cls, path: Path) -> Case:
        raw = load_data(path)
        try:
            case = cls(**raw)
        except TypeError as exc:
            raise ConfigError(f"{path}: {exc}") from exc
        if case.approvals not in APPROVALS or (case.during and case.during not in DURING):
            raise ConfigError(f"{path}: unknown approvals or during")
        return case


def offline_env(executor: str, server: ScriptedModelServer, scratch: Scratch) -> dict[str, str]:
    """Each CLI's offline settings for the scripted server (protocols/*.md)."""
    if executor.startswith("claude"):
        return claude_offline_env(server, scratch)
    if executor.startswith("codex"):
        return codex_offline_env(server, scratch)
    if executor == "gemini":
        return gemini_offline_env(server, scratch)
    if executor == "qwen":
        return qwen_offline_env(server, scratch)
    if executor == "opencode":
        return opencode_offline_env(server, scratch)
    if executor == "copilot":
        return copilot_offline_env(server, scratch)
    if executor == "droid":
        return droid_offline_env(server, scratch)
    if executor == "cursor":
        return {"HOME": str(scratch.home)}  # only a fake of it runs here: it talks to no model
    raise ConfigError(f"no offline recipe for {executor!r}")


async def run_case(
    executor: str, case: Case, scratch: Scratch, raw_log: Path, limit: float = 90
) -> RunResult:
    """Run ``case`` with the real CLI in ``scratch`` against the scripted server; the raw log goes to
    ``raw_log``."""
    for name, text in case.files.items():
        (scratch.work / name).write_text(text)
    resume = case.resume
    if case.prelude is not None:
        first = await _run(
            executor, Case(**case.prelude), scratch, scratch.root / "prelude.jsonl", None, limit
        )
        resume = first.session_id
    return await _run(executor, case, scratch, raw_log, resume, limit)


async def _run(
    executor: str, case: Case, scratch: Scratch, raw_log: Path, resume: str | None, limit: float
) -> RunResult:
    steps = orjson.loads(orjson.dumps(case.steps).decode().replace(SCRATCH_PLACEHOLDER, str(scratch.root)))
    with ScriptedModelServer(Scenario.from_obj({"steps": steps})) as server:
        task = Task(
            prompt=case.prompt,
            cwd=scratch.work,
            env=offline_env(executor, server, scratch),
            raw_log=raw_log,
            timeout=limit,
            resume=resume,
            keep_open=case.during == "follow_up",
        )
        agent = default_registry.create(executor, ExecutorOptions(**case.options))
        async with Run(agent, task, APPROVALS[case.approvals]()) as run:
            if case.during:
                await DURING[case.during](run, case)
            return await run.wait()


async def _follow_up(run: Run, case: Case) -> None:
    await _until(run, lambda e: e.type.kind == "token_usage")
    await run.send_message(case.follow_up)
    await _until(run, lambda e: e.type.kind == "token_usage")
    await run.end_input()


async def _interrupt_mid_stream(run: Run, case: Case) -> None:
    await _until(run, lambda e: e.type.kind == "assistant_message" and e.content.count(" ") >= 2)
    await run.interrupt()


async def _interrupt_when_running(run: Run, case: Case) -> None:
    await _until(run, lambda e: isinstance(e.type, ToolUse) and e.type.tool.status == "running")
    await anyio.sleep(0.5)  # let the command really start
    await run.interrupt()


async def _until(run: Run, test: Callable[[NormalizedEntry], bool]) -> None:
    async for patch in run.patches():
        if test(patch.entry):
            return


DURING: dict[str, During] = {
    "follow_up": _follow_up,
    "interrupt_mid_stream": _interrupt_mid_stream,
    "interrupt_when_running": _interrupt_when_running,
}
