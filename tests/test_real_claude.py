"""The real Claude Code CLI from npm (pinned in clis/package.json), against the scripted model server.

Skipped when the CLI is not installed, unless ORCHESTRATE_REQUIRE_REAL_CLIS=1 (set by .ci/run), which
turns a missing CLI into a failure so CI can never pass without running these.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from orchestrate import AutoApprove, AutoDeny, Run, Task
from orchestrate.approvals import ApprovalService
from orchestrate.entries import CommandRun, FileWrite
from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.claude_code import ClaudeCodeExecutor
from orchestrate.run import RunResult
from orchestrate.testing import Scenario, ScriptedModelServer
from orchestrate.testing.offline import Scratch, claude_offline_env

from .helpers import CLI_BIN, FirstNeverAnswered, group_members, needs_cli, tool_status, wait_for

CLAUDE = CLI_BIN / "claude"

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.real_cli,
    needs_cli("claude"),
]


@pytest.fixture
def scratch() -> Any:
    with Scratch.create() as s:
        yield s


async def run_real(
    scratch: Scratch,
    steps: list[dict[str, Any]],
    approvals: ApprovalService,
    prompt: str = "do the task",
    during: Any = None,
) -> tuple[RunResult, ScriptedModelServer]:
    assert CLAUDE.exists(), "the pinned Claude Code CLI is not installed (npm ci --prefix clis)"
    executor = ClaudeCodeExecutor(ExecutorOptions(base_command=[str(CLAUDE)]))
    with ScriptedModelServer(Scenario.from_obj({"steps": steps})) as server:
        task = Task(prompt=prompt, cwd=scratch.work, env=claude_offline_env(server, scratch), timeout=90)
        with anyio.fail_after(120):
            async with Run(executor, task, approvals) as run:
                if during is not None:
                    await during(run)
                result = await run.wait()
    for pid in run.pids:
        assert group_members(pid) == []
    return result, server


async def test_plain_answer(scratch: Scratch) -> None:
    result, server = await run_real(
        scratch, [{"text": "Hello from the scripted model."}], AutoDeny(), prompt="say hello"
    )
    assert result.outcome == "success" and result.exit_code == 0
    assert result.final_text == "Hello from the scripted model."
    assert result.session_id and result.token_usage.output_tokens > 0
    [request] = server.main_requests()
    assert "say hello" in str(request["body"]["messages"])


async def test_approved_bash(scratch: Scratch) -> None:
    steps = [
        {
            "text": "Running it.",
            "tool": {
                "name": "Bash",
                "input": {"command": "touch made.txt && echo created", "description": "Create a file"},
            },
        },
        {"text": "Result: {tool_result}"},
    ]
    result, _ = await run_real(scratch, steps, AutoApprove())
    [tool] = result.tool_results
    assert (tool.tool_name, tool.status, tool.approval and tool.approval.decision) == (
        "Bash",
        "success",
        "approved",
    )
    assert isinstance(tool.action, CommandRun) and tool.action.result is not None
    assert (tool.action.result.exit_code, tool.action.result.stdout) == (0, "created")
    assert (scratch.work / "made.txt").exists()
    assert result.final_text == "Result: created"


async def test_denied_bash(scratch: Scratch) -> None:
    (scratch.work / "keep.txt").write_text("precious")
    steps = [
        {
            "tool": {
                "name": "Bash",
                "input": {"command": "rm -f keep.txt && echo removed", "description": "Remove"},
            }
        },
        {"text": "Result: {tool_result}"},
    ]
    result, server = await run_real(scratch, steps, AutoDeny("deleting files is not allowed"))
    [tool] = result.tool_results
    assert (tool.status, tool.approval and tool.approval.reason) == (
        "denied",
        "deleting files is not allowed",
    )
    assert (scratch.work / "keep.txt").read_text() == "precious"
    # The model saw the denial as the tool's result.
    assert "deleting files is not allowed" in str(server.main_requests()[-1]["body"]["messages"][-1])
    assert result.outcome == "success"


async def test_file_write_with_its_diff(scratch: Scratch) -> None:
    target = scratch.work / "hello.py"
    steps = [
        {
            "tool": {
                "name": "Write",
                "input": {"file_path": str(target), "content": "print('hi')\nprint('bye')\n"},
            }
        },
        {"text": "Done."},
    ]
    result, _ = await run_real(scratch, steps, AutoApprove())
    [tool] = result.tool_results
    assert tool.status == "success" and isinstance(tool.action, FileWrite)
    assert target.read_text() == "print('hi')\nprint('bye')\n"
    [change] = tool.action.changes
    assert change.type == "create"
    assert change.unified_diff is not None
    assert "+print('hi')\n+print('bye')\n" in change.unified_diff and change.unified_diff.startswith(
        "--- /dev/null"
    )


async def test_an_interrupt_withdraws_the_pending_question(scratch: Scratch) -> None:
    """Interrupted while can_use_tool is pending, the CLI sends control_cancel_request: the question
    is taken back from the approval service, and the command never runs."""
    steps = [{"tool": {"name": "Bash", "input": {"command": "touch never.txt", "description": "Touch"}}}]
    person = FirstNeverAnswered()

    async def during(run: Run) -> None:
        await wait_for(run, tool_status("pending_approval"))
        await run.interrupt()

    result, _ = await run_real(scratch, steps, person, during=during)
    assert person.asked == ["touch never.txt"] and person.taken_back == ["touch never.txt"]
    [tool] = result.tool_results
    assert (tool.status, tool.approval and tool.approval.decision) == ("cancelled", "cancelled")
    assert not (scratch.work / "never.txt").exists()
    assert result.outcome == "interrupted"
