"""Attacks through what an ACP agent asks the client to do (``terminal/create``,
``fs/*``), with the real fake ACP agent, real processes and real files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from orchestrate.approvals import ApprovalService, RulePolicy
from orchestrate.run import RunResult

from .helpers import fake_acp, run_agent

pytestmark = pytest.mark.anyio

Step = tuple[str, dict[str, Any]]


async def script(
    cwd: Path, steps: list[Step], approvals: ApprovalService | None = None
) -> tuple[list[dict[str, Any]], RunResult]:
    """Have the fake agent make ``steps`` (requests to us) in order; their answers."""
    result, _ = await run_agent(fake_acp(), cwd, "script " + orjson.dumps(steps).decode(), approvals)
    return orjson.loads(result.final_text), result


async def test_a_terminal_string_runs_in_the_shell_whose_grammar_judged_it(tmp_path: Path) -> None:
    """The policy reads a command string with a bash grammar: ``$'a\\'; touch MARK; #'`` is one
    ``echo`` there.  dash (Debian's /bin/sh) has no ``$'...'`` quoting and runs ``touch MARK``.
    The command must run in bash, so what was approved is what runs."""
    work = tmp_path / "work"
    work.mkdir()
    policy = RulePolicy.from_dict({"allow": {"commands": ["echo*"]}, "deny": {"commands": ["rm -rf*"]}})
    line = "echo $'a\\'; touch MARK; #'"
    answers, _ = await script(
        work,
        [
            ("terminal/create", {"command": line}),
            ("terminal/wait_for_exit", {"terminalId": "$0"}),
            ("terminal/output", {"terminalId": "$0"}),
        ],
        policy,
    )
    assert "error" not in answers[0], answers[0]  # approved: one echo
    assert answers[1]["result"]["exitCode"] == 0
    assert not (work / "MARK").exists(), "the shell ran a command the policy never saw"
    assert answers[2]["result"]["output"] == "a'; touch MARK; #\n"
