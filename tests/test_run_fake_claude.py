"""The Claude Code executor end to end, against a fake CLI script over real pipes and processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrate import ApprovalDecision, ApprovalRequest, AutoApprove, AutoDeny, Run, RunClosedError, Task
from orchestrate.approvals import ApprovalService
from orchestrate.entries import ErrorEntry, ToolUseEntry
from orchestrate.run import RunResult

from .helpers import (
    FAST,
    During,
    FirstNeverAnswered,
    Never,
    assert_nothing_survives,
    errors,
    fake_claude,
    pid_alive,
    run_agent,
    texts,
    tool_status,
    wait_for,
)

pytestmark = pytest.mark.anyio


async def run_fake(
    tmp_path: Path,
    prompt: str,
    approvals: ApprovalService | None = None,
    during: During | None = None,
    **task: Any,
) -> tuple[RunResult, Run]:
    return await run_agent(fake_claude(), tmp_path, prompt, approvals, during, **task)


def tools(result: RunResult) -> list[ToolUseEntry]:
    return result.tool_results


class ChangeCommand:
    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        assert request.command == "echo original" and request.tool_name == "Bash"
        return ApprovalDecision.approve({"command": "echo changed", "description": "Print"})


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_plain_answer(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "plain")
    assert result.outcome == "success" and result.exit_code == 0
    assert result.final_text == "hello from fake claude"
    assert result.session_id and result.token_usage.input_tokens == 10
    assert result.token_usage.total_cost_usd == pytest.approx(0.001)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_approve(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "tool", AutoApprove())
    [tool] = tools(result)
    assert (tool.status, tool.approval and tool.approval.decision) == ("success", "approved")
    assert tool.action.result.stdout == "ran: echo original"  # type: ignore[union-attr]
    assert result.outcome == "success"


async def test_approve_with_changed_input_runs_the_changed_command(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "tool", ChangeCommand())
    assert tools(result)[0].action.result.stdout == "ran: echo changed"  # type: ignore[union-attr]


async def test_deny(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "tool", AutoDeny("not today"))
    [tool] = tools(result)
    assert (tool.status, tool.approval.decision, tool.approval.reason) == ("denied", "denied", "not today")  # type: ignore[union-attr]
    assert result.outcome == "success" and result.final_text == "tool done"


async def test_deny_and_interrupt(tmp_path: Path) -> None:
    class DenyStop:
        async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
            return ApprovalDecision.deny("stop", interrupt=True)

    result, _ = await run_fake(tmp_path, "tool", DenyStop())
    assert tools(result)[0].status == "denied"
    assert result.outcome == "interrupted" and result.cli_exit_code == 130
    assert "Interrupted by user" in texts(result, "system_message")


async def test_interrupt_mid_stream(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "assistant_message" and e.content.count("w") >= 3)
        await run.interrupt()

    result, _ = await run_fake(tmp_path, "slow", during=during)
    assert result.outcome == "interrupted"
    partial = texts(result, "assistant_message")[0]
    assert partial.startswith("w0 w1 w2") and "w49" not in partial
    assert ("interrupted", "The turn was interrupted (aborted_streaming)") in errors(result)


async def test_interrupt_while_an_approval_is_pending(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, tool_status("pending_approval"))
        await run.interrupt()

    result, _ = await run_fake(tmp_path, "tool", Never(), during=during)
    [tool] = tools(result)
    assert (tool.status, tool.approval.decision) == ("cancelled", "cancelled")  # type: ignore[union-attr]
    assert result.outcome == "interrupted"


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_withdrawn_request_is_taken_back_and_the_next_is_answered(tmp_path: Path) -> None:
    """control_cancel_request for a pending can_use_tool cancels the question we were asking (the
    service sees the cancellation, no answer is sent), and the next question is not held behind it."""
    person = FirstNeverAnswered()
    result, _ = await run_fake(tmp_path, "withdraw", person, within=10)
    assert person.asked == ["echo first", "echo second"] and person.taken_back == ["echo first"]
    first, second = tools(result)
    assert (first.status, first.approval.decision) == ("cancelled", "cancelled")  # type: ignore[union-attr]
    assert (second.status, second.approval.decision) == ("success", "approved")  # type: ignore[union-attr]
    assert result.final_text == "first answered 0 times; second allow"
    assert result.outcome == "success"


async def test_approval_timeout_is_timed_out_and_interrupts(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "tool", Never(), approval_timeout=0.3)
    [tool] = tools(result)
    assert (tool.status, tool.approval.decision) == ("timed_out", "timed_out")  # type: ignore[union-attr]
    assert result.outcome == "interrupted"


async def test_follow_up_while_the_agent_is_busy(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "assistant_message")
        await run.send_message("plain please")

    result, _ = await run_fake(tmp_path, "slow", during=during)
    assert texts(result, "user_message") == ["slow", "plain please"]
    assert texts(result, "assistant_message")[-1] == "hello from fake claude"
    assert (
        result.outcome == "success" and len([e for e in result.entries if e.type.kind == "token_usage"]) == 2
    )


async def test_follow_up_after_idle_with_keep_open(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "token_usage")
        await run.send_message("tool")
        await wait_for(run, lambda e: e.type.kind == "token_usage")
        await run.end_input()

    result, run = await run_fake(tmp_path, "plain", AutoApprove(), during=during, keep_open=True)
    assert texts(result, "user_message") == ["plain", "tool"]
    assert tools(result)[0].status == "success" and result.outcome == "success"
    with pytest.raises(RunClosedError):
        await run.send_message("too late")


async def test_resume(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "plain again", resume="session-123")
    assert result.session_id == "session-123" and result.final_text == "resumed: plain again"


async def test_resume_of_a_missing_session_is_a_clear_error(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "plain", resume="missing")
    assert result.outcome == "failed" and result.cli_exit_code == 1
    assert ("resume_failed", "No conversation found with session ID: missing") in errors(result)


async def test_resume_fallback_starts_a_fresh_session(tmp_path: Path) -> None:
    result, run = await run_fake(tmp_path, "plain", resume="missing", resume_fallback=True)
    assert len(run.pids) == 2
    assert result.outcome == "success" and result.final_text == "hello from fake claude"
    assert result.session_id not in (None, "missing")
    assert any("was not found; starting a fresh session" in t for t in texts(result, "system_message"))


async def test_crash_mid_stream(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "crash")
    assert result.outcome == "failed" and result.exit_code == 3
    assert "simulated crash" in result.stderr_tail
    codes = [code for code, _ in errors(result)]
    assert "protocol_error" in codes  # the line the crash cut short
    assert ("process_exited") in codes
    message = next(m for c, m in errors(result) if c == "process_exited")
    assert "code 3" in message and "simulated crash" in message
    assert texts(result, "assistant_message") == ["about to crash"]


async def test_hang_past_the_timeout(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "hang", timeout=1.5)
    assert result.outcome == "timed_out" and result.cli_exit_code == 1
    assert ("timeout", "the run exceeded its time limit of 1.5 s") in errors(result)
    child = next(e for e in result.entries if e.metadata and e.metadata.extra and "raw" in e.metadata.extra)
    grandchild = child.metadata.extra["raw"]["pid"]  # type: ignore[union-attr,index]
    assert not pid_alive(grandchild)


async def test_cancel(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "assistant_message")
        run.cancel()

    result, _ = await run_fake(tmp_path, "slow", during=during)
    assert result.outcome == "cancelled" and result.cli_exit_code == 130


async def test_leaving_the_block_early_stops_the_agent(tmp_path: Path) -> None:
    run = Run(fake_claude(), Task(prompt="hang", cwd=tmp_path), shutdown=FAST)
    with anyio.fail_after(20):
        async with run:
            await wait_for(run, lambda e: e.type.kind == "system_message" and "fake_child" in e.content)
    assert (await run.wait()).outcome == "cancelled"
    assert_nothing_survives(run)


async def test_garbage_on_stdout(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "garbage")
    bad = [m for c, m in errors(result) if c == "protocol_error"]
    assert len(bad) == 3
    contents = [e.content for e in result.entries if isinstance(e.type, ErrorEntry)]
    assert "this is not json" in contents and any("\ufffd" in c for c in contents)
    assert result.outcome == "success" and result.final_text == "hello from fake claude"


async def test_requests_we_do_not_serve_get_an_error_answer(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "ask-host")
    assert result.final_text.startswith("host answered error: orchestrate does not serve 'elicitation'")


async def test_environment_overrides_and_nesting_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDECODE", "1")
    result, _ = await run_fake(tmp_path, "secret", env={"FAKE_SECRET": "s3"})
    assert result.final_text == "secret=s3 claudecode=<unset>"


async def test_raw_log_goes_where_asked(tmp_path: Path) -> None:
    result, _ = await run_fake(tmp_path, "plain", raw_log=tmp_path / "logs" / "run.jsonl")
    assert result.raw_log == tmp_path / "logs" / "run.jsonl"


async def test_set_permission_mode_mid_run(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "token_usage")
        await run.set_permission_mode("acceptEdits")
        await run.end_input()

    result, _ = await run_fake(tmp_path, "plain", during=during, keep_open=True)
    system = texts(result, "system_message")
    assert "Permission mode set to acceptEdits" in system  # what we sent
    assert "Permission mode: acceptEdits" in system  # what the CLI confirmed
