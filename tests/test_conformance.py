"""The conformance matrix: every executor whose CLI installs here passes every scenario its protocol can
express, against the scripted model.  This is what the README's matrix shows."""

from __future__ import annotations

import pytest

from orchestrate.testing.conformance import (
    SCENARIOS,
    conformance_executors,
    consistency_problems,
    run_conformance,
)

from .helpers import REQUIRE_REAL_CLIS

pytestmark = [pytest.mark.anyio, pytest.mark.real_cli]


# Every real CLI through every scenario: about five minutes on two idle cores (ten agents), so the
# default two minutes would fail it on a loaded machine though nothing is wrong.
@pytest.mark.timeout(1200)
async def test_every_installed_cli_passes_every_scenario_it_can_express() -> None:
    cells = await run_conformance()
    assert (
        {c.executor for c in cells}
        == set(conformance_executors())
        >= {"claude-code", "codex", "codex-exec", "gemini", "qwen"}
        | {"opencode", "copilot", "droid", "claude-code-acp", "codex-acp"}
    )
    assert len(cells) == len(conformance_executors()) * len(SCENARIOS)
    failures = [f"{c.executor}/{c.scenario}: {c.why}" for c in cells if c.verdict == "fail"]
    assert failures == []
    # One shape for one meaning: each cell alone, and the agents of each scenario against each other.
    assert consistency_problems(cells) == []
    if REQUIRE_REAL_CLIS:
        assert [c for c in cells if c.verdict == "not installed"] == []
    assert {(c.executor, c.scenario) for c in cells if c.verdict == "n/a"} == {
        ("codex-exec", "tool_approved"),
        ("codex-exec", "tool_denied"),
        ("gemini", "plan"),
        ("copilot", "plan"),
    }
