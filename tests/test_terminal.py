"""The terminal (PTY) executor against a small full-screen text UI: prompts, redraws, a permission
question, interrupt, follow-ups; every byte read and key sent replays to the same entries."""

from __future__ import annotations

import gc
import os
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import orjson
import pytest

from orchestrate import AutoApprove, AutoDeny, Run
from orchestrate.entries import CommandRun
from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.terminal import TerminalExecutor
from orchestrate.process.pipes import ProcessSpec, ShutdownPolicy
from orchestrate.process.pty import PtyAgentProcess

from .helpers import FIXTURES, group_members, run_agent, texts, wait_for

pytestmark = pytest.mark.anyio
FAKE_TUI = FIXTURES / "bin" / "fake_tui.py"


def fake_tui() -> TerminalExecutor:
    return TerminalExecutor(ExecutorOptions(base_command=[sys.executable, str(FAKE_TUI)]))


async def test_a_prompt_and_its_answer_without_echo_or_chrome(tmp_path: Path) -> None:
    result, _ = await run_agent(fake_tui(), tmp_path, "hello there")
    assert texts(result, "user_message") == ["hello there"]
    assert texts(result, "assistant_message") == ["Answer line 1 for: hello there\nAnswer line 2."]
    assert result.outcome == "success"


@pytest.mark.parametrize(
    ("approvals", "status", "answer"),
    [(AutoApprove(), "success", "ran touch x"), (AutoDeny("no"), "denied", "denied: not running touch x")],
)
async def test_the_permission_question_is_answered_by_keys(tmp_path: Path, approvals, status, answer) -> None:  # type: ignore[no-untyped-def]
    result, _ = await run_agent(fake_tui(), tmp_path, "permission please", approvals)
    [tool] = result.tool_results
    assert tool.status == status and isinstance(tool.action, CommandRun) and tool.action.command == "touch x"
    assert texts(result, "assistant_message") == [answer]


async def test_interrupt(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "assistant_message" and "word2" in e.content)
        await run.interrupt()

    async def slow_screen(run: Run) -> None:
        with anyio.fail_after(20):
            await during(run)

    result, _ = await run_agent(fake_tui(), tmp_path, "slow please", during=slow_screen)
    assert result.outcome == "interrupted" and "interrupted" in result.final_text


async def test_follow_up_turns(tmp_path: Path) -> None:
    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "assistant_message")
        while not run._driver or not run._driver.is_idle:  # noqa: ASYNC110 - test polling
            await anyio.sleep(0.05)
        await run.send_message("second question")
        await wait_for(run, lambda e: e.type.kind == "assistant_message" and "second" in e.content)
        await run.end_input()

    result, _ = await run_agent(fake_tui(), tmp_path, "first question", during=during, keep_open=True)
    assert texts(result, "user_message") == ["first question", "second question"]
    assert texts(result, "assistant_message")[-1] == "Answer line 1 for: second question\nAnswer line 2."


async def test_a_pty_agent_that_ignores_everything_is_killed(tmp_path: Path) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    process = await PtyAgentProcess.spawn(
        ProcessSpec([sys.executable, "-c", code], tmp_path, {"PATH": "/usr/bin"})
    )
    with anyio.fail_after(15):
        assert (
            await process.shutdown(ShutdownPolicy(interrupt_grace=0.2, stdin_grace=0.3, term_grace=0.3)) == -9
        )
    assert group_members(process.pid) == []


async def test_a_finished_terminal_never_closes_a_later_one(tmp_path: Path) -> None:
    """Once shut down, a pty's fd number is free for the next one; the old ptyprocess object being
    collected must not close it again (it did, and took a later run's terminal with it)."""
    spec = ProcessSpec(["cat"], tmp_path, {"PATH": "/usr/bin:/bin"})
    first = await PtyAgentProcess.spawn(spec)
    await first.shutdown(ShutdownPolicy(interrupt_grace=0.1, stdin_grace=0.5, term_grace=0.5))
    second = await PtyAgentProcess.spawn(spec)
    del first
    gc.collect()
    await second.write(b"still open\r")
    with anyio.fail_after(10):
        seen = b""
        while b"still open" not in seen:
            await anyio.wait_readable(second.child.fd)
            seen += os.read(second.child.fd, 4096)
    await second.shutdown(ShutdownPolicy(interrupt_grace=0.1, stdin_grace=0.5, term_grace=0.5))


FLAGS = ["--stable-seconds", "0.5", "--approvals", "auto", "--output", "jsonl", "permission please"]


def test_from_the_command_line(tmp_path: Path) -> None:
    """`orchestrate run -e terminal --command ...` as the README gives it, with a shorter still time."""
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_TUI))}"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrate", "run", "-e", "terminal", "--command", command, *FLAGS],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    patches = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert any(
        p["entry"]["type"]["kind"] == "assistant_message" and "ran touch x" in p["entry"]["content"]
        for p in patches
    )
    assert TerminalExecutor(ExecutorOptions(stable_seconds=0.5)).still_for == 0.5
    assert TerminalExecutor().still_for == TerminalExecutor.stable_seconds
