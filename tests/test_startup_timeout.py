"""The start-up watchdog: an agent that prints nothing at all is stopped as timed out with its own
code; one that prints is never touched by it.  And the CLI's defaults for both time limits."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.claude_code import ClaudeCodeExecutor

from .helpers import errors, fake_claude, run_agent

pytestmark = pytest.mark.anyio

SILENT = [sys.executable, "-c", "import time; time.sleep(60)"]  # starts, then says nothing


async def test_an_agent_that_prints_nothing_is_stopped_as_timed_out(tmp_path: Path) -> None:
    started = time.monotonic()
    executor = ClaudeCodeExecutor(ExecutorOptions(base_command=SILENT))
    result, _ = await run_agent(executor, tmp_path, "hi", startup_timeout=0.5)
    assert time.monotonic() - started < 15
    assert result.outcome == "timed_out"
    assert [code for code, _ in errors(result)][:1] == ["startup_timeout"]
    assert "printed nothing within 0.5 s" in errors(result)[0][1]


async def test_an_agent_that_prints_is_left_alone(tmp_path: Path) -> None:
    # "slow" streams for about five seconds: far past the limit, but it printed at once.
    result, _ = await run_agent(fake_claude(), tmp_path, "slow", startup_timeout=0.5, within=40)
    assert result.outcome == "success"
    assert "startup_timeout" not in [code for code, _ in errors(result)]


def test_the_cli_has_default_limits_and_names_the_stop(tmp_path: Path) -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "orchestrate", "run", "--help"], capture_output=True, text=True, timeout=30
    ).stdout
    assert "--startup-timeout" in help_text and "default: 120" in help_text.replace("\n", " ")
    assert "default: 7200" in " ".join(help_text.split())
    done = subprocess.run(
        [
            sys.executable, "-m", "orchestrate", "run", "-e", "claude-code",
            "--base-command", " ".join(SILENT[:2]) + " 'import time; time.sleep(60)'",
            "--approvals", "deny", "--startup-timeout", "0.5", "--cwd", str(tmp_path), "hi",
        ],
        capture_output=True,
        text=True,
        timeout=40,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "printed nothing within 0.5 s" in done.stdout + done.stderr
