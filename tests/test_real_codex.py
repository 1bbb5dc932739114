"""The real Codex CLI from npm (pinned in clis/package.json) against the scripted Responses server.

Skipped when the CLI is not installed, unless ORCHESTRATE_REQUIRE_REAL_CLIS=1 (set by .ci/run)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from orchestrate import AutoApprove, AutoDeny, Run, Task
from orchestrate.approvals import ApprovalService
from orchestrate.entries import CommandRun, FileWrite
from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.codex import CodexExecExecutor, CodexExecutor
from orchestrate.run import RunResult
from orchestrate.testing import Scenario, ScriptedModelServer
from orchestrate.testing.offline import Scratch, codex_offline_env

from .helpers import CLI_BIN, assert_nothing_survives, needs_cli

CODEX = CLI_BIN / "codex"

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.real_cli,
    needs_cli("codex"),
]


@pytest.fixture
def scratch() -> Iterator[Scratch]:
    with Scratch.create() as s:
        yield s


async def run_real(
    scratch: Scratch,
    steps: list[dict[str, Any]],
    approvals: ApprovalService,
    *,
    exec_mode: bool = False,
    prompt: str = "do the task",
    resume: str | None = None,
) -> tuple[RunResult, ScriptedModelServer]:
    assert CODEX.exists(), "the pinned Codex CLI is not installed (npm ci --prefix clis)"
    options = ExecutorOptions(base_command=[str(CODEX)])
    executor = CodexExecExecutor(options) if exec_mode else CodexExecutor(options)
    with ScriptedModelServer(Scenario.from_obj({"steps": steps})) as server:
        task = Task(
            prompt=prompt, cwd=scratch.work, env=codex_offline_env(server, scratch), timeout=90, resume=resume
        )
        with anyio.fail_after(120):
            async with Run(executor, task, approvals) as run:
                result = await run.wait()
    assert_nothing_survives(run)
    return result, server


@pytest.mark.parametrize("exec_mode", [False, True], ids=["app-server", "exec"])
async def test_plain_answer(scratch: Scratch, exec_mode: bool) -> None:
    result, server = await run_real(
        scratch,
        [{"text": "Hello from the scripted model."}],
        AutoDeny(),
        exec_mode=exec_mode,
        prompt="say hello",
    )
    assert result.outcome == "success" and result.exit_code == 0
    assert result.final_text == "Hello from the scripted model." and result.session_id
    assert result.token_usage.input_tokens == 100 and result.token_usage.output_tokens == 20
    assert "say hello" in str(server.main_requests()[0]["body"]["input"])


async def test_approved_command(scratch: Scratch) -> None:
    steps = [
        {"tool": {"name": "exec_command", "input": {"cmd": "touch made.txt && echo created"}}},
        {"text": "Result: {tool_result}"},
    ]
    result, _ = await run_real(scratch, steps, AutoApprove())
    [tool] = result.tool_results
    assert (tool.status, tool.approval and tool.approval.decision) == ("success", "approved")
    assert isinstance(tool.action, CommandRun) and tool.action.command == "touch made.txt && echo created"
    assert tool.action.result and (tool.action.result.exit_code, tool.action.result.stdout) == (
        0,
        "created\n",
    )
    assert (scratch.work / "made.txt").exists() and result.final_text == "Result: created"


async def test_declined_command(scratch: Scratch) -> None:
    (scratch.work / "keep.txt").write_text("precious")
    steps = [
        {"tool": {"name": "exec_command", "input": {"cmd": "rm -f keep.txt && echo removed"}}},
        {"text": "Result: {tool_result}"},
    ]
    result, server = await run_real(scratch, steps, AutoDeny("deleting files is not allowed"))
    [tool] = result.tool_results
    assert (tool.status, tool.approval and tool.approval.decision) == ("denied", "denied")
    assert (scratch.work / "keep.txt").read_text() == "precious"
    assert "rejected by user" in str(server.main_requests()[-1]["body"]["input"][-1])
    assert result.outcome == "success"


async def test_apply_patch_file_change_with_its_diff(scratch: Scratch) -> None:
    patch = "*** Begin Patch\n*** Add File: hello.py\n+print('hi')\n+print('bye')\n*** End Patch\n"
    steps = [{"tool": {"name": "apply_patch", "input": {"input": patch}}}, {"text": "Done."}]
    result, _ = await run_real(scratch, steps, AutoApprove())
    [tool] = result.tool_results
    # a new file is a file_write whichever agent made it (one shape across agents)
    assert tool.status == "success" and isinstance(tool.action, FileWrite) and tool.action.path == "hello.py"
    assert (scratch.work / "hello.py").read_text() == "print('hi')\nprint('bye')\n"
    [change] = tool.action.changes
    assert change.type == "create" and change.unified_diff is not None
    assert "+print('hi')\n+print('bye')\n" in change.unified_diff
    turn_diffs = [
        e for e in result.entries if e.metadata and e.metadata.extra and "turnDiff" in e.metadata.extra
    ]
    # The turn's diff (in metadata: the entry's text only names the files, the tool showed the diff)
    # is relative to the enclosing git repository, wherever that is on this machine.
    last = turn_diffs[-1] if turn_diffs else None
    assert last is not None and last.metadata is not None and last.metadata.extra is not None
    assert "hello.py" in last.content
    assert re.search(r"\+\+\+ b/(.*/)?hello\.py\n", last.metadata.extra["turnDiff"])


@pytest.mark.parametrize("exec_mode", [False, True], ids=["app-server", "exec"])
async def test_resumed_thread(scratch: Scratch, exec_mode: bool) -> None:
    first, _ = await run_real(
        scratch, [{"text": "I will remember 42."}], AutoDeny(), exec_mode=exec_mode, prompt="remember 42"
    )
    second, server = await run_real(
        scratch,
        [{"text": "You said 42."}],
        AutoDeny(),
        exec_mode=exec_mode,
        prompt="what did I say?",
        resume=first.session_id,
    )
    assert second.outcome == "success" and second.session_id == first.session_id
    history = str(server.main_requests()[0]["body"]["input"])
    assert "remember 42" in history and "I will remember 42." in history
