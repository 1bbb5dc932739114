"""The ACP client end to end, against a fake ACP agent over real pipes and processes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from orchestrate import ApprovalDecision, ApprovalRequest, AutoApprove, AutoDeny, Run
from orchestrate.approvals import ApprovalService, RulePolicy
from orchestrate.entries import CommandRun, ToolUseEntry
from orchestrate.process.rawlog import read_raw_log
from orchestrate.run import RunResult

from .helpers import (
    During,
    FirstNeverAnswered,
    Never,
    errors,
    fake_acp,
    run_agent,
    texts,
    tool_status,
    wait_for,
)

pytestmark = pytest.mark.anyio


async def run_fake(
    cwd: Path,
    prompt: str,
    approvals: ApprovalService | None = None,
    during: During | None = None,
    **task: Any,
) -> RunResult:
    result, _ = await run_agent(fake_acp(), cwd, prompt, approvals, during, **task)
    return result


def only_tool(result: RunResult) -> ToolUseEntry:
    [tool] = result.tool_results
    return tool


class Always:
    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        assert request.command == "touch x" and request.tool_call_id
        return ApprovalDecision.approve(for_session=True)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_plain_answer_and_capabilities_from_initialize(tmp_path: Path) -> None:
    result, run = await run_agent(fake_acp(), tmp_path, "plain")
    assert result.outcome == "success" and result.final_text == "hello from fake acp"
    assert result.session_id and result.session_id.startswith("sess_")
    assert (result.token_usage.input_tokens, result.token_usage.cache_read_tokens) == (10, 2)
    assert run.capabilities.session_resume  # the fake says loadSession: true
    assert not fake_acp().capabilities.session_resume  # which the generic executor cannot know up front
    assert "Connected to Fake ACP 0.0" in texts(result, "system_message")


@pytest.mark.parametrize(
    ("approvals", "status", "text"),
    [
        (AutoApprove(), "success", "allowed with once"),
        (Always(), "success", "allowed with always"),
        (AutoDeny("no"), "denied", "rejected with no"),
    ],
)
async def test_permission_options(tmp_path: Path, approvals: ApprovalService, status: str, text: str) -> None:
    result = await run_fake(tmp_path, "permission", approvals)
    tool = only_tool(result)
    assert tool.status == status and result.final_text == text
    if status == "success":
        assert isinstance(tool.action, CommandRun) and tool.action.result
        assert (tool.action.result.exit_code, tool.action.result.stdout) == (0, "touched")
        assert tool.approval and tool.approval.for_session == (text == "allowed with always")


async def test_permission_for_a_call_never_announced(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "ask-first", AutoApprove())
    tool = only_tool(result)
    assert (tool.tool_name, tool.status) == ("run_shell_command", "success")


async def test_cancel_while_a_permission_is_pending_answers_cancelled(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, tool_status("pending_approval"))
        await run.interrupt()

    result = await run_fake(tmp_path, "permission", Never(), during=during)
    tool = only_tool(result)
    assert (tool.status, tool.approval and tool.approval.decision) == ("cancelled", "cancelled")
    assert result.outcome == "interrupted"


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_permission_the_agent_cancels_is_taken_back(tmp_path: Path) -> None:
    """$/cancel_request for a pending session/request_permission cancels the question we were asking
    and still answers it (cancelled, as ACP asks); the next question is answered at once."""
    person = FirstNeverAnswered()
    result = await run_fake(tmp_path, "withdraw", person, within=10)
    assert person.asked == ["touch first", "touch second"] and person.taken_back == ["touch first"]
    first, second = result.tool_results
    assert (first.status, first.approval and first.approval.decision) == ("cancelled", "cancelled")
    assert (second.status, second.approval and second.approval.decision) == ("success", "approved")
    second_answer = "{'outcome': 'selected', 'optionId': 'once'}"
    assert result.final_text == f"first={{'outcome': 'cancelled'}} second={second_answer}"


async def test_a_permission_left_open_by_an_ended_turn_is_taken_back(tmp_path: Path) -> None:
    """Qwen ends a cancelled turn without waiting for the permission answer: the stale question is
    taken back when the turn ends, so the next turn's question is not held behind it."""
    person = FirstNeverAnswered()

    async def during(run: Run) -> None:
        await wait_for(run, tool_status("pending_approval"))
        await run.send_message("permission")  # the next turn, once this one is over

    result = await run_fake(tmp_path, "abandon", person, during=during, within=10)
    assert person.asked == ["touch x", "touch x"] and person.taken_back == ["touch x"]
    stale, fresh = result.tool_results
    # Qwen says the call failed ("cancelled before execution"); our answer says why.
    assert (stale.status, stale.approval and stale.approval.decision) == ("failed", "cancelled")
    assert fresh.status == "success" and result.final_text == "allowed with once"


async def test_cancel_mid_turn(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "assistant_message" and "w3" in e.content)
        await run.interrupt()

    result = await run_fake(tmp_path, "slow", during=during)
    assert result.outcome == "interrupted" and "w99" not in result.final_text
    assert ("interrupted", "The turn was interrupted") in errors(result)


async def test_files_inside_the_workspace(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "fs-ok", AutoApprove())
    assert result.final_text == "write error=None; read='line2\\n'; missing=-32002"
    assert (tmp_path / "sub" / "new.txt").read_text() == "line1\nline2\n"


async def test_escapes_from_the_workspace_are_refused_and_nothing_is_touched(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (tmp_path / "outside.txt").write_text("untouched")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(outside)
    result = await run_fake(work, "fs-escape", AutoApprove())
    assert result.final_text == "; ".join(
        f"{op} {name}: -32602"
        for name in ("hostname", "outside.txt", "secret.txt")
        for op in ("read", "write")
    )
    assert (outside / "secret.txt").read_text() == "secret"
    assert (tmp_path / "outside.txt").read_text() == "untouched"
    assert sorted(p.name for p in work.iterdir()) == ["link"]


async def test_writes_follow_the_policy_path_rules(tmp_path: Path) -> None:
    policy = RulePolicy.from_dict({"autonomy": "full", "deny": {"paths": ["sub/**"]}})
    result = await run_fake(tmp_path, "fs-ok", policy)
    assert result.final_text.startswith("write error={'code': -32602, 'message': \"writing ")
    assert "was refused: denied by policy rule 'sub/**'" in result.final_text
    assert not (tmp_path / "sub").exists()


async def test_terminals(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "terminal", AutoApprove())
    # Killed by the process layer's ladder, which sends SIGTERM first.
    assert result.final_text == "exit=0 output='hi\\n' killed=SIGTERM"
    denied = await run_fake(tmp_path, "terminal", AutoDeny("no commands"))
    assert denied.final_text == "refused: running 'echo hi' was refused: no commands"


async def test_terminals_die_with_the_session(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "leak", AutoApprove())
    assert result.final_text == "started term_1"
    with anyio.fail_after(5):
        while _processes_with("sleep 31"):  # noqa: ASYNC110 - polling /proc, which has no event to wait on
            await anyio.sleep(0.05)


def _processes_with(cmdline: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        if args == cmdline:
            found.append(entry.name)
    return found


async def test_load_a_session_and_a_missing_one(tmp_path: Path) -> None:
    loaded = await run_fake(tmp_path, "plain", resume="sess_old")
    assert loaded.session_id == "sess_old"
    # The replayed history is history (one system entry), not new messages (test_acp_v1.py).
    assert texts(loaded, "user_message") == ["plain"]
    assert texts(loaded, "assistant_message") == ["hello from fake acp"]
    assert any("**User:** earlier question" in t for t in texts(loaded, "system_message"))
    missing = await run_fake(tmp_path, "plain", resume="missing")
    assert missing.outcome == "failed"
    assert ("resume_failed", "session/load failed: Invalid session identifier") in errors(missing)


async def test_authentication_when_the_agent_requires_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_AUTH", "1")
    result = await run_fake(tmp_path, "plain")
    assert result.outcome == "failed"  # the generic executor knows no auth method to pick
    assert any(code == "auth_required" for code, _ in errors(result))


async def test_plan_vendor_requests_and_modes(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "plan")
    [plan] = [e for e in result.entries if e.type.kind == "plan"]
    assert [(i.content, i.status) for i in plan.type.items] == [
        ("first", "completed"),
        ("second", "in_progress"),
    ]  # type: ignore[union-attr]
    vendor = await run_fake(tmp_path, "vendor")
    assert vendor.final_text == "vendor answered -32601"
    moded, _ = await run_agent(fake_acp(permission_mode="plan"), tmp_path, "plain")
    assert "Mode: plan" in texts(moded, "system_message")


async def test_follow_up_while_busy(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "assistant_message")
        await run.send_message("plain please")

    result = await run_fake(tmp_path, "slow", during=during)
    assert texts(result, "user_message") == ["slow", "plain please"]
    assert result.final_text == "hello from fake acp" and len(texts(result, "token_usage")) == 2


async def test_crash_with_the_prompt_pending(tmp_path: Path) -> None:
    result = await run_fake(tmp_path, "crash")
    assert result.outcome == "failed" and result.exit_code == 5
    [(_, message)] = [e for e in errors(result) if e[0] == "process_exited"]
    assert "simulated acp crash" in message


async def test_authenticate_then_open_the_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrate.executors.acp import AcpExecutor

    class KeyAgent(AcpExecutor):
        def auth_method(self, methods: list[dict[str, Any]], env: dict[str, str]) -> str | None:
            return "key" if any(m.get("id") == "key" for m in methods) else None

    monkeypatch.setenv("FAKE_ACP_AUTH", "1")
    executor = KeyAgent(fake_acp().options)
    result, _ = await run_agent(executor, tmp_path, "plain")
    assert result.outcome == "success" and result.final_text == "hello from fake acp"


async def test_mcp_servers_are_passed_to_the_session(tmp_path: Path) -> None:
    servers = {
        "files": {"command": "mcp-files", "args": ["--root", "."], "env": {"K": "v"}},
        "remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "x"}},
    }
    result, _ = await run_agent(fake_acp(mcp_servers=servers), tmp_path, "plain")
    assert result.raw_log is not None
    sent = [
        orjson.loads(line)
        for r in read_raw_log(result.raw_log)[1]
        if r.stream == "stdin"
        for line in r.data.splitlines()
    ]
    [new] = [m for m in sent if m.get("method") == "session/new"]
    assert new["params"]["mcpServers"] == [
        {
            "name": "files",
            "command": "mcp-files",
            "args": ["--root", "."],
            "env": [{"name": "K", "value": "v"}],
        },
        {
            "type": "http",
            "name": "remote",
            "url": "http://127.0.0.1:9/mcp",
            "headers": [{"name": "Authorization", "value": "x"}],
        },
    ]
    assert new["params"]["cwd"] == _real(tmp_path)


def _real(path: Path) -> str:
    return os.path.realpath(path)
