"""The Codex app-server executor end to end, against a fake app-server over real pipes and processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrate import ApprovalDecision, ApprovalRequest, AutoApprove, AutoDeny, Run
from orchestrate.approvals import ApprovalService
from orchestrate.entries import CommandRun, FileWrite, ToolUseEntry
from orchestrate.run import RunResult
from orchestrate.run.codex import MAX_OPEN_ITEMS, CodexDriver

from .helpers import (
    During,
    FirstNeverAnswered,
    Never,
    errors,
    fake_codex,
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
) -> RunResult:
    result, _ = await run_agent(fake_codex(), tmp_path, prompt, approvals, during, **task)
    return result


def only_tool(result: RunResult) -> ToolUseEntry:
    [tool] = result.tool_results
    return tool


class Always:
    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision.approve(for_session=True)


class DenyStop:
    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        assert request.command == "touch x" and request.tool_name == "commandExecution"
        return ApprovalDecision.deny("stop", interrupt=True)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_plain_answer(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "plain")
    assert result.outcome == "success" and result.final_text == "hello from fake codex"
    assert result.session_id and result.session_id.startswith("thread_")
    assert (result.token_usage.input_tokens, result.token_usage.cache_read_tokens) == (100, 10)
    assert texts(result, "user_message") == ["plain"]


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_accept(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "command", AutoApprove())
    tool = only_tool(result)
    assert (tool.status, tool.approval and tool.approval.decision) == ("success", "approved")
    assert isinstance(tool.action, CommandRun) and tool.action.command == "touch x"
    assert tool.action.result and (tool.action.result.exit_code, tool.action.result.stdout) == (
        0,
        "touched\n",
    )
    assert result.final_text == "approved with accept"


async def test_accept_for_the_session(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "command", Always())
    tool = only_tool(result)
    assert tool.approval and tool.approval.for_session
    assert result.final_text == "approved with acceptForSession"


async def test_decline(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "command", AutoDeny("no thanks"))
    tool = only_tool(result)
    assert (tool.status, tool.approval and tool.approval.decision) == ("denied", "denied")
    assert result.outcome == "success" and result.final_text == "it was decline"


async def test_cancel_ends_the_turn_interrupted(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "command", DenyStop())
    assert only_tool(result).status == "denied"
    assert result.outcome == "interrupted" and result.cli_exit_code == 130


async def test_file_change_approved_with_its_diff(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "patch", AutoApprove())
    tool = only_tool(result)
    # A new file: a file_write, its path relative to the working directory (the one shape).
    assert tool.status == "success" and isinstance(tool.action, FileWrite)
    assert tool.action.changes[0].unified_diff and "+new\n" in tool.action.changes[0].unified_diff
    assert tool.action.path == "new.txt"


class Recording:
    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(request)
        return ApprovalDecision.approve()


async def test_a_file_change_is_judged_with_the_paths_its_start_gave(tmp_path: Path) -> None:
    # The request names only the item; its paths and diff are in the item's start, which the
    # driver records as the line is read (not through the JSON-RPC peer's dispatch).
    approvals = Recording()
    result = await run_fake(tmp_path, "patch", approvals)
    [request] = approvals.requests
    assert request.tool_name == "fileChange" and request.paths == (str(tmp_path / "new.txt"),)
    assert request.tool_input["changes"][0]["diff"] == "new\n"
    assert only_tool(result).status == "success"


async def test_approval_timeout_cancels(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "command", Never(), approval_timeout=0.3)
    tool = only_tool(result)
    assert (tool.status, tool.approval and tool.approval.decision) == ("timed_out", "timed_out")
    assert result.outcome == "interrupted"


async def test_interrupt_during_a_command_closes_the_item(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, tool_status("running"))
        await run.interrupt()

    result = await run_fake(tmp_path, "sleep", during=during)
    assert only_tool(result).status == "cancelled"  # the server never completes it: we do
    assert result.outcome == "interrupted"
    assert ("interrupted", "The turn was interrupted") in errors(result)


async def test_interrupt_during_streaming(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "assistant_message" and "w2" in e.content)
        await run.interrupt()

    result = await run_fake(tmp_path, "slow", during=during)
    assert result.outcome == "interrupted" and "w99" not in result.final_text


async def test_follow_up_while_busy_becomes_the_next_turn(tmp_path: Path) -> None:
    # The follow-up is sent while the turn waits on its approval, so the turn is surely busy (sent
    # after the first text instead, a fast turn could end first and the test would race it).
    sent = anyio.Event()

    class ApproveOnceSent:
        async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
            with anyio.fail_after(10):
                await sent.wait()
            return ApprovalDecision.approve()

    async def during(run: Run) -> None:
        await wait_for(run, tool_status("pending_approval"))
        await run.send_message("plain please")
        sent.set()

    result = await run_fake(tmp_path, "command", ApproveOnceSent(), during=during)
    assert texts(result, "user_message") == ["command", "plain please"]
    assert result.final_text == "hello from fake codex" and result.outcome == "success"
    assert len(texts(result, "token_usage")) == 2


async def test_follow_up_after_idle_with_keep_open(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "token_usage")
        await run.send_message("plain again")
        await wait_for(run, lambda e: e.type.kind == "token_usage")
        await run.end_input()

    result = await run_fake(tmp_path, "plain", during=during, keep_open=True)
    assert texts(result, "user_message") == ["plain", "plain again"]


async def test_resume_and_fork(tmp_path: Path) -> None:
    resumed = await run_fake(tmp_path, "plain", resume="thread_old")
    assert resumed.session_id == "thread_old"
    assert "Thread `thread_old` resumed with model `fake-codex`" in texts(resumed, "system_message")
    forked = await run_fake(tmp_path, "plain", resume="thread_old", fork=True)
    assert forked.session_id not in (None, "thread_old")


async def test_resume_of_a_missing_thread(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "plain", resume="missing")
    assert result.outcome == "failed"
    assert errors(result) == [
        ("resume_failed", "thread/resume failed: no rollout found for thread id missing")
    ]
    fresh, run = await run_agent(fake_codex(), tmp_path, "plain", resume="missing", resume_fallback=True)
    assert fresh.outcome == "success" and len(run.pids) == 2


async def test_requests_we_do_not_serve_get_method_not_found(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "ask-user")
    assert result.final_text.startswith(
        "client answered -32601: method not found: item/tool/requestUserInput"
    )


async def test_model_failure_fails_the_run_cleanly(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "model-error")
    assert result.outcome == "failed" and result.cli_exit_code == 1
    assert errors(result) == [("api_error", "scripted model failure")]


async def test_protocol_errors_are_shown_and_the_run_goes_on(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "garbage")
    shown = [message for code, message in errors(result) if code == "protocol_error"]
    # not JSON, no known shape, and an answer to request 999 that we never sent
    assert len(shown) == 3 and "request 999" in shown[2] and result.outcome == "success"
    assert result.final_text == "still fine"


async def test_crash_with_a_request_pending(tmp_path: Path) -> None:
    with anyio.fail_after(20):
        result = await run_fake(tmp_path, "crash")
    assert result.outcome == "failed" and result.exit_code == 4
    assert "simulated app-server crash" in result.stderr_tail
    [(_, message)] = [e for e in errors(result) if e[0] == "process_exited"]
    assert "code 4" in message and "simulated app-server crash" in message


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_request_the_server_settles_itself_is_taken_back(tmp_path: Path) -> None:
    """serverRequest/resolved before our answer cancels the question we were asking (and sends no
    answer); the next approval request is asked and answered at once."""
    person = FirstNeverAnswered()
    result = await run_fake(tmp_path, "withdraw", person, within=10)
    assert person.asked == ["touch first", "touch second"] and person.taken_back == ["touch first"]
    first, second = result.tool_results
    assert (first.status, first.approval.decision) == ("cancelled", "cancelled")  # type: ignore[union-attr]
    assert (second.status, second.approval.decision) == ("success", "approved")  # type: ignore[union-attr]
    assert result.final_text == "first answered 0 times; second accept"


def test_the_driver_keeps_an_item_only_while_it_runs_and_a_bounded_number_open() -> None:
    # An approval reads its item (command, file changes with whole-file diffs), so the driver keeps
    # it from its start; a long run of tools must not grow that table: an item goes when it
    # completes, and an agent that never completes its items keeps at most MAX_OPEN_ITEMS.
    driver = CodexDriver.__new__(CodexDriver)  # (the table alone: no process, no connection)
    driver._items = {}

    def item(method: str, item_id: str, **fields: object) -> None:
        driver._item_seen(method, {"item": {"id": item_id, **fields}})

    item("item/started", "cmd", type="commandExecution", command="ls")
    item("item/started", "msg", type="agentMessage", text="hi")
    assert list(driver._items) == ["cmd"]
    item("item/completed", "cmd", type="commandExecution", command="ls")
    assert driver._items == {}
    for n in range(MAX_OPEN_ITEMS + 44):
        item("item/started", f"c{n}", changes=[{"path": "f", "diff": "x" * 1000}])
    assert len(driver._items) == MAX_OPEN_ITEMS
    assert "c0" not in driver._items and f"c{MAX_OPEN_ITEMS + 43}" in driver._items
