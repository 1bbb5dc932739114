"""The conformance matrix: every executor whose CLI installs here passes every scenario its protocol can
express, against the scripted model.  This is what the README's matrix shows."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from orchestrate.errors import ConfigError
from orchestrate.testing import conformance
from orchestrate.testing.conformance import (
    SCENARIOS,
    Cell,
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


class Installed:
    """A registry whose every executor reads as installed, without running its CLI's --version."""

    def create(self, name: str) -> Installed:
        return self

    async def check_availability(self) -> SimpleNamespace:
        return SimpleNamespace(installed=True, reason=None)


@pytest.mark.parametrize("jobs", [1, 2, 5])
async def test_cells_run_jobs_at_a_time_and_come_back_in_order(
    jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    running, most = 0, 0

    async def one(executor: str, name: str, *_: Any) -> Cell:
        nonlocal running, most
        running += 1
        most = max(most, running)
        # later cells finish first, so an order kept by completion would come back reversed
        await anyio.sleep(0.01 * (len(SCENARIOS) - SCENARIOS.index(name)))
        running -= 1
        return Cell(executor, name, "pass")

    monkeypatch.setattr(conformance, "_one", one)
    monkeypatch.setattr(conformance, "default_registry", Installed())
    cells = await run_conformance(["claude-code", "gemini"], jobs=jobs)
    assert [(c.executor, c.scenario) for c in cells] == [
        (e, s) for e in ("claude-code", "gemini") for s in SCENARIOS
    ]
    assert most == jobs


async def test_jobs_below_one_are_refused() -> None:
    with pytest.raises(ConfigError, match="jobs must be at least 1"):
        await run_conformance(["claude-code"], jobs=0)
