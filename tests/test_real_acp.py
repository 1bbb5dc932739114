"""The real Gemini CLI and Qwen Code from npm (pinned in clis/package.json), in ACP mode, against the
scripted model server (Gemini API and OpenAI chat dialects).

Skipped when a CLI is not installed, unless ORCHESTRATE_REQUIRE_REAL_CLIS=1 (set by .ci/run)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import orjson
import pytest

from orchestrate import AutoApprove, AutoDeny, Run, Task, get_executor
from orchestrate.approvals import ApprovalService
from orchestrate.entries import CommandRun, FileWrite
from orchestrate.executors.base import ExecutorOptions
from orchestrate.process.rawlog import read_raw_log
from orchestrate.run import RunResult
from orchestrate.testing import Scenario, ScriptedModelServer
from orchestrate.testing.cases import offline_env
from orchestrate.testing.offline import Scratch

from .helpers import CLI_BIN, assert_nothing_survives, needs_cli

AGENTS = [pytest.param(name, marks=needs_cli(name)) for name in ("gemini", "qwen")]
# Gemini's default model "auto" asks a router model first; naming a model skips that side request.
MODELS = {"gemini": "gemini-2.5-flash", "qwen": None}

pytestmark = [pytest.mark.anyio, pytest.mark.real_cli]


@pytest.fixture
def scratch() -> Iterator[Scratch]:
    with Scratch.create() as s:
        yield s


async def run_real(
    agent: str,
    scratch: Scratch,
    steps: list[dict[str, Any]],
    approvals: ApprovalService,
    prompt: str = "do the task",
) -> tuple[RunResult, ScriptedModelServer]:
    assert (CLI_BIN / agent).exists(), f"the pinned {agent} CLI is not installed (npm ci --prefix clis)"
    executor = get_executor(agent, ExecutorOptions(base_command=[str(CLI_BIN / agent)]))
    with ScriptedModelServer(Scenario.from_obj({"steps": steps})) as server:
        task = Task(
            prompt=prompt,
            cwd=scratch.work,
            env=offline_env(agent, server, scratch),
            timeout=90,
            model=MODELS[agent],
        )
        with anyio.fail_after(120):
            async with Run(executor, task, approvals) as run:
                result = await run.wait()
    assert_nothing_survives(run)
    return result, server


@pytest.mark.parametrize("agent", AGENTS)
async def test_plain_answer(agent: str, scratch: Scratch) -> None:
    result, server = await run_real(
        agent, scratch, [{"text": "Hello from the scripted model."}], AutoDeny(), prompt="say hello"
    )
    assert result.outcome == "success" and result.exit_code == 0
    assert result.final_text == "Hello from the scripted model." and result.session_id
    assert result.token_usage.input_tokens == 100 and result.token_usage.output_tokens == 20
    assert "say hello" in str(server.main_requests()[0]["body"])


@pytest.mark.parametrize("agent", AGENTS)
async def test_approved_shell_command(agent: str, scratch: Scratch) -> None:
    steps = [
        {
            "tool": {
                "name": "run_shell_command",
                "input": {"command": "touch made.txt && echo created", "description": "Create a file"},
            }
        },
        {"text": "Result: {tool_result}"},
    ]
    result, _ = await run_real(agent, scratch, steps, AutoApprove())
    [tool] = result.tool_results
    assert (tool.status, tool.approval and tool.approval.decision) == ("success", "approved")
    assert isinstance(tool.action, CommandRun) and tool.action.command == "touch made.txt && echo created"
    assert (scratch.work / "made.txt").exists() and "created" in result.final_text


@pytest.mark.parametrize("agent", AGENTS)
async def test_rejected_shell_command(agent: str, scratch: Scratch) -> None:
    (scratch.work / "keep.txt").write_text("precious")
    steps = [
        {
            "tool": {
                "name": "run_shell_command",
                "input": {"command": "rm -f keep.txt && echo removed", "description": "Remove a file"},
            }
        },
        {"text": "Result: {tool_result}"},
    ]
    result, _ = await run_real(agent, scratch, steps, AutoDeny("deleting files is not allowed"))
    [tool] = result.tool_results
    assert (tool.status, tool.approval and tool.approval.decision) == ("denied", "denied")
    assert (scratch.work / "keep.txt").read_text() == "precious"
    assert result.outcome == "success"


@pytest.mark.parametrize("agent", AGENTS)
async def test_file_written_through_the_client(agent: str, scratch: Scratch) -> None:
    target = scratch.work / "hello.py"
    steps = [
        {"tool": {"name": "write_file", "input": {"file_path": str(target), "content": "print('hi')\n"}}},
        {"text": "Wrote it."},
    ]
    result, _ = await run_real(agent, scratch, steps, AutoApprove())
    [tool] = result.tool_results
    # a new file is a file_write whichever agent made it (one shape across agents), its path relative
    assert tool.status == "success" and isinstance(tool.action, FileWrite) and tool.action.path == "hello.py"
    assert tool.action.changes[0].type == "create"
    assert tool.action.changes[0].unified_diff and "+print('hi')" in tool.action.changes[0].unified_diff
    assert target.read_text() == "print('hi')\n"
    assert result.raw_log is not None
    stdout = b"".join(r.data for r in read_raw_log(result.raw_log)[1] if r.stream == "stdout")
    writes = [m for m in map(orjson.loads, stdout.splitlines()) if m.get("method") == "fs/write_text_file"]
    assert [w["params"]["path"] for w in writes] == [str(target)]  # the agent wrote through us, not itself
