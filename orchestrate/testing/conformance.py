"""The conformance lab: every installed real CLI runs the same scenarios against the scripted model,
and each run is checked for what must come out of it.

The scenarios of an executor are ``conformance/<executor>.yaml``: one case per scenario (cases.py)
plus ``expect`` (checked below) or ``not_applicable`` (why its protocol cannot express it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import anyio
import yaml

from ..entries import FileEdit, FileWrite, Plan, ToolUseEntry
from ..errors import ConfigError, OrchestrateError
from ..registry import default_registry
from ..run import RunResult
from .cases import Case, run_case
from .consistency import Observed, cross_agent_problems, observe_log, run_problems
from .offline import Scratch
from .recording import scrub_scratch_log

__all__ = [
    "SCENARIOS",
    "Cell",
    "check",
    "conformance_executors",
    "consistency_problems",
    "load_scenarios",
    "run_conformance",
]

SCENARIOS = (
    "plain_answer",
    "tool_approved",
    "tool_denied",
    "file_edit",
    "follow_up",
    "interrupt",
    "plan",
    "two_tools",
    "retried_error",
)
Verdict = Literal["pass", "fail", "n/a", "not installed"]
JOBS = 2
"""Cells run at once by default.  One at a time keeps about one core busy (the whole matrix: 279 s
of CPU in 281 s), so on two cores two at a time take about half the wall time."""


@dataclass
class Cell:
    executor: str
    scenario: str
    verdict: Verdict
    why: str = ""
    seconds: float = 0.0
    observed: Observed | None = None
    """What the agent produced (for the cross-agent consistency check), when it ran."""


@dataclass
class ConformanceScenario:
    case: Case | None
    expect: dict[str, Any] = field(default_factory=dict)
    not_applicable: str | None = None


def conformance_executors() -> list[str]:
    """The executors that have a scenario set."""
    root = files("orchestrate.testing").joinpath("conformance")
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))


def load_scenarios(executor: str) -> dict[str, ConformanceScenario]:
    resource = files("orchestrate.testing").joinpath(f"conformance/{executor}.yaml")
    if not resource.is_file():
        raise ConfigError(
            f"no conformance scenarios for {executor!r}; there are: {', '.join(conformance_executors())}"
        )
    raw = yaml.safe_load(resource.read_text(encoding="utf-8")) or {}
    out = {}
    for name in SCENARIOS:
        spec = dict(raw.get(name) or {})
        if "not_applicable" in spec:
            out[name] = ConformanceScenario(None, not_applicable=str(spec["not_applicable"]))
            continue
        expect = spec.pop("expect", {})
        out[name] = ConformanceScenario(Case(**spec), expect)
    return out


async def run_conformance(
    executors: list[str] | None = None, record: Path | None = None, jobs: int = JOBS
) -> list[Cell]:
    """Every scenario on every executor asked for (default: all that have scenarios), ``jobs`` cells
    at a time, in that order; with ``record``, each cell's raw log is kept there as
    ``<executor>/<scenario>.jsonl``, scrubbed."""
    if jobs < 1:
        raise ConfigError(f"jobs must be at least 1, not {jobs}")
    plan = []
    for executor in executors or conformance_executors():
        scenarios = load_scenarios(executor)
        availability = await default_registry.create(executor).check_availability()
        for name in SCENARIOS:
            plan.append((executor, name, scenarios[name], availability.installed, availability.reason))
    cells: list[Cell | None] = [None] * len(plan)
    limiter = anyio.CapacityLimiter(jobs)

    async def one(i: int) -> None:
        async with limiter:
            cells[i] = await _one(*plan[i], record)

    # Each cell has its own scratch home, working directory and model server: cells share nothing
    # but the machine.
    async with anyio.create_task_group() as tg:
        for i in range(len(plan)):
            tg.start_soon(one, i)
    return [c for c in cells if c is not None]


def consistency_problems(cells: list[Cell]) -> list[str]:
    """Where the cells that ran break the one shape, alone or across agents (consistency.py)."""
    observed = [c.observed for c in cells if c.observed is not None]
    return [p for o in observed for p in run_problems(o)] + cross_agent_problems(observed)


async def _one(
    executor: str,
    name: str,
    scenario: ConformanceScenario,
    installed: bool,
    reason: str | None,
    record: Path | None = None,
) -> Cell:
    if scenario.case is None:
        return Cell(executor, name, "n/a", scenario.not_applicable or "")
    if not installed:
        return Cell(executor, name, "not installed", reason or "")
    with Scratch.create(prefix=f"conformance-{executor}-") as scratch:
        try:
            result = await run_case(executor, scenario.case, scratch, scratch.root / "raw.jsonl", limit=120)
        except OrchestrateError as exc:
            return Cell(executor, name, "fail", f"{type(exc).__name__}: {exc}")
        problems = check(result, scenario.expect, scratch)
        raw = scratch.root / "raw.jsonl"
        observed = observe_log(executor, name, raw)
        if record is not None:
            scrub_scratch_log(raw, record / executor / f"{name}.jsonl", scratch)
    seconds = _duration(result)
    return Cell(executor, name, "fail" if problems else "pass", "; ".join(problems), seconds, observed)


def check(result: RunResult, expect: dict[str, Any], scratch: Scratch) -> list[str]:
    """What in ``result`` (and the working directory) falls short of ``expect``."""
    problems = []
    if "outcome" in expect and result.outcome != expect["outcome"]:
        problems.append(
            f"outcome {result.outcome}, expected {expect['outcome']}"
            + (f" ({result.error})" if result.error else "")
        )
    if "final_text" in expect and result.final_text.strip() != expect["final_text"]:
        problems.append(f"final text {result.final_text[:80]!r}")
    if "final_contains" in expect and expect["final_contains"] not in result.final_text:
        problems.append(f"final text {result.final_text[:80]!r} lacks {expect['final_contains']!r}")
    users = [e for e in result.entries if e.type.kind == "user_message"]
    if "user_messages" in expect and len(users) != expect["user_messages"]:
        problems.append(f"{len(users)} user messages, expected {expect['user_messages']}")
    if "history_contains" in expect and not any(
        expect["history_contains"] in e.content for e in result.entries
    ):
        problems.append(f"nothing shows the earlier turn {expect['history_contains']!r}")
    if "tool" in expect:
        problems += _check_tool(result.tool_results, expect["tool"])
    if "tools" in expect:
        problems += _check_tools(result.tool_results, expect["tools"])
    if "plan" in expect:
        problems += _check_plan(result, expect["plan"])
    for path, wanted in (expect.get("files") or {}).items():
        target = scratch.work / path
        if wanted is False and target.exists():
            problems.append(f"{path} exists")
        elif wanted is not False and not target.exists():
            problems.append(f"{path} is missing")
        elif isinstance(wanted, str) and wanted and target.read_text() != wanted:
            problems.append(f"{path} holds {target.read_text()[:60]!r}")
    return problems


def _check_tool(tools: list[ToolUseEntry], expect: dict[str, Any]) -> list[str]:
    kind = expect.get("action")
    candidates = [
        t
        for t in tools
        if kind is None or t.action.kind == kind or (kind == "file_edit" and isinstance(t.action, FileWrite))
    ]
    if not candidates:
        return [f"no {kind or 'tool'} call among {[t.action.kind for t in tools]}"]
    tool = candidates[-1]
    problems = []
    if "status" in expect and tool.status != expect["status"]:
        problems.append(f"{tool.tool_name} {tool.status}, expected {expect['status']}")
    decision = tool.approval.decision if tool.approval else None
    if "approval" in expect and decision != expect["approval"]:
        problems.append(f"approval {decision}, expected {expect['approval']}")
    if "diff_contains" in expect:
        diffs = (
            "".join(c.unified_diff or "" for c in tool.action.changes)
            if isinstance(tool.action, FileEdit | FileWrite)
            else ""
        )
        if expect["diff_contains"] not in diffs:
            problems.append(f"the diff lacks {expect['diff_contains']!r}")
    return problems


def _check_tools(tools: list[ToolUseEntry], expect: dict[str, Any]) -> list[str]:
    """``{count, action, status}``: how many tool calls of that action kind ended with that status."""
    matching = [
        t
        for t in tools
        if t.action.kind == expect.get("action", t.action.kind) and t.status == expect.get("status", t.status)
    ]
    if len(matching) != expect["count"]:
        seen = [(t.action.kind, t.status) for t in tools]
        wanted = f"{expect['count']} {expect.get('action', '')} {expect.get('status', '')}"
        return [f"{len(matching)} matching tool calls, expected {wanted}: {seen}"]
    return []


def _check_plan(result: RunResult, expect: dict[str, Any]) -> list[str]:
    """``{items: [[content, status], ...]}``: the last plan the agent showed, item by item."""
    plans = [e.type for e in result.entries if isinstance(e.type, Plan)]
    if not plans:
        return ["no plan entry"]
    shown = [[item.content, item.status] for item in plans[-1].items]
    return [] if shown == expect["items"] else [f"the plan is {shown}, expected {expect['items']}"]


def _duration(result: RunResult) -> float:
    stamps = [e.timestamp for e in result.entries if e.timestamp is not None]
    return (max(stamps) - min(stamps)).total_seconds() if len(stamps) > 1 else 0.0
