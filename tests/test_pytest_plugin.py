"""The pytest plugin, used the way a user's project would: a test file in a fresh directory, run by
pytest in a subprocess, with the plugin loaded from the installed package's entry point."""

from __future__ import annotations

import shutil

import pytest

from .helpers import CLI_BIN, FIXTURES

USER_TESTS = """
from pathlib import Path


def test_replay_a_recorded_run(orchestrate_replay):
    replayed = orchestrate_replay(Path("bash_approved.jsonl"), "claude-code")
    tools = [e.type.tool for e in replayed.entries if e.type.kind == "tool_use"]
    assert replayed.outcome == "success"
    assert [(t.tool_name, t.status) for t in tools] == [("Bash", "success")]
    assert sum(p.op == "add" for p in replayed.patches) == len(replayed.entries)


def test_a_real_cli_against_a_scripted_model(scripted_agent):
    run = scripted_agent(
        "claude-code",
        [{"tool": {"name": "Bash", "input": {"command": "echo from-the-tool > out.txt"}}}, {"text": "done"}],
        approvals=__import__("orchestrate").AutoApprove(),
    )
    assert run.result.outcome == "success" and run.result.final_text == "done"
    assert (run.workdir / "out.txt").read_text() == "from-the-tool\\n"
    assert any("echo from-the-tool" in str(r.get("body")) for r in run.requests)
"""


def test_the_plugin_in_a_users_project(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    shutil.copy(
        FIXTURES / "claude-stream-json" / "bash_approved.jsonl", pytester.path / "bash_approved.jsonl"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    if (CLI_BIN / "claude").exists():
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, skipped=1)
