"""Claude Code's interactive UI (the real CLI from npm, no -p) driven through a pseudo-terminal
against the scripted model server: its answer read off the screen, its permission menu answered by
keys through the approval service, and the run's raw log replaying to the same entries."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from orchestrate import AutoApprove, AutoDeny
from orchestrate.approvals import ApprovalService
from orchestrate.entries import CommandRun
from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.terminal import ClaudeCodeTuiExecutor
from orchestrate.run import RunResult
from orchestrate.testing import Scenario, ScriptedModelServer
from orchestrate.testing.offline import Scratch, claude_tui_offline_env

from .helpers import CLI_BIN, needs_cli, run_agent, texts

CLAUDE = CLI_BIN / "claude"

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.real_cli,
    needs_cli("claude"),
]

BASH_STEPS = [
    {
        "text": "I'll run it.",
        "tool": {"name": "Bash", "input": {"command": "touch made.txt && echo done", "description": "Make"}},
    },
    {"text": "Result: {tool_result}"},
]


@pytest.fixture
def scratch() -> Iterator[Scratch]:
    with Scratch.create() as s:
        yield s


async def run_tui(
    scratch: Scratch, steps: list[dict[str, Any]], approvals: ApprovalService, prompt: str
) -> tuple[RunResult, ScriptedModelServer]:
    assert CLAUDE.exists(), "the pinned Claude Code CLI is not installed (npm install --prefix clis)"
    executor = ClaudeCodeTuiExecutor(ExecutorOptions(base_command=[str(CLAUDE)]))
    with ScriptedModelServer(Scenario.from_obj({"steps": steps})) as server:
        env = claude_tui_offline_env(server, scratch)
        result, _ = await run_agent(executor, scratch.work, prompt, approvals, within=90, env=env)
    return result, server


async def test_the_answer_is_read_off_the_screen(scratch: Scratch) -> None:
    result, server = await run_tui(scratch, [{"text": "Hello from the TUI model."}], AutoDeny(), "say hello")
    assert texts(result, "user_message") == ["say hello"]
    assert texts(result, "assistant_message") == ["Hello from the TUI model."]
    assert result.outcome == "success"
    assert "say hello" in str(server.main_requests()[0]["body"]["messages"])


async def test_an_approved_command_runs(scratch: Scratch) -> None:
    result, server = await run_tui(scratch, BASH_STEPS, AutoApprove(), "do the task")
    [tool] = result.tool_results
    assert isinstance(tool.action, CommandRun) and tool.action.command == "touch made.txt && echo done"
    assert tool.status == "success" and tool.approval is not None and tool.approval.decision == "approved"
    assert (scratch.work / "made.txt").exists()
    assert "Result: done" in texts(result, "assistant_message")[-1]
    assert len(server.main_requests()) == 2


async def test_a_denied_command_does_not_run(scratch: Scratch) -> None:
    result, server = await run_tui(scratch, BASH_STEPS, AutoDeny("not here"), "do the task")
    [tool] = result.tool_results
    assert tool.status == "denied" and tool.approval is not None and tool.approval.decision == "denied"
    assert not (scratch.work / "made.txt").exists()
    assert len(server.main_requests()) == 1  # the UI stopped the turn: the model never saw a result
