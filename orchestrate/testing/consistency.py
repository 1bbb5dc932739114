"""One shape for one meaning, across every agent: what the entries of the conformance scenarios must
agree on, whichever agent produced them (issue 14 point 3).

Two kinds of check.  Of each run alone (:func:`run_problems`): a tool call's status only moves
forward (created, pending approval, running, done); no question is left pending on a closed call;
paths and diff headers are relative to the task's working directory; a file change's diff appears
once (never again as raw diff text in another entry); metadata keys are camelCase.  Across the
agents of one scenario (:func:`cross_agent_problems`): the same entry kinds, the same action kind,
status, approval and reason of the scenario's tool call, the same change types, paths and diff
headers, and the command's output for every agent that sends it.  What an agent cannot say is in
``CANNOT_SAY`` and ``NO_COMMAND_OUTPUT``; where it says something else because it does something
else (not because we read it otherwise), ``OWN_BEHAVIOUR`` names the value and the reason, and only
that value passes.

The observations come from the live conformance cells (testing/conformance.py keeps each cell's
patches) or from their recordings in ``fixtures/conformance`` (tests/test_consistency.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..entries import (
    EntryPatch,
    FileEdit,
    FileRead,
    FileWrite,
    NormalizedEntry,
    Search,
    ToolUse,
    ToolUseEntry,
)
from ..registry import default_registry
from ..replay import replay

__all__ = [
    "CANNOT_SAY",
    "NO_COMMAND_OUTPUT",
    "OWN_BEHAVIOUR",
    "Observed",
    "cross_agent_problems",
    "observe_log",
    "run_problems",
    "signature",
]

# Agents whose wire never carries a command's output, so there is none to show (checked: the
# consistency test fails if such an agent starts sending it and we do not show it).
NO_COMMAND_OUTPUT = {
    "gemini": "gemini-cli 0.61's ACP tool_call_update carries a shell call's output only when its "
    "display form is text, and for the shell tool it is not: the output goes to the model alone",
}
# What a protocol cannot say, by agent and signature key: left out of the comparison for that agent.
CANNOT_SAY = {
    ("codex-exec", "approval"): "codex exec has no live approvals: the sandbox is chosen up front",
    ("codex-exec", "diff headers"): "codex exec's file_change items name the file and kind, with no diff",
}
# Where an agent itself behaves otherwise than the others in one scenario (not a shape of ours):
# by agent, scenario and signature key, the value it gives and why.  That value alone is let
# through; any other is a problem, the others' included (then the entry here must go).
OWN_BEHAVIOUR: dict[tuple[str, str, str], tuple[Any, str]] = {
    ("codex-acp", "file_edit", "approval"): (
        None,
        "codex-acp 0.16's read-only and auto modes read files through Codex's bubblewrap helper, "
        "which its npm package does not ship, so the edit case runs in full-access mode "
        "(testing/conformance/codex-acp.yaml), where Codex asks nothing before an edit",
    ),
    ("codex-acp", "tool_denied", "outcome"): (
        "interrupted",
        "codex-acp 0.16's only refusal of an escalated command is 'abort' (\"No, and tell Codex "
        'what to do differently"): Codex ends the turn with stopReason cancelled, where the '
        "others go on and answer",
    ),
}
# The tool call a scenario is about: its action kind, and a word of the command's output.
SCENARIO_TOOL = {
    "tool_approved": ("command_run", "created"),
    "tool_denied": ("command_run", None),
    "file_edit": ("file_edit", None),
}
_RANK = {"created": 0, "pending_approval": 1, "running": 2}
_HUNK = re.compile(r"^@@ [^\n]*\n(?:[ +-][^\n]*\n){1,3}", re.M)


@dataclass
class Observed:
    """What one agent produced for one scenario: the patches as they streamed, in order."""

    executor: str
    scenario: str
    work_dir: str
    patches: list[EntryPatch]
    outcome: str | None = None
    entries: list[NormalizedEntry] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.entries:
            latest: dict[int, NormalizedEntry] = {}
            for patch in self.patches:
                latest[patch.index] = patch.entry
            self.entries = [latest[i] for i in sorted(latest)]

    @property
    def tools(self) -> list[ToolUseEntry]:
        return [e.type.tool for e in self.entries if isinstance(e.type, ToolUse)]

    def __str__(self) -> str:
        return f"{self.executor}/{self.scenario}"


def observe_log(executor: str, scenario: str, raw_log: Path) -> Observed:
    """Replay a raw log of ``executor`` (its working directory from the log's header)."""
    normalizer = default_registry.create(executor).create_normalizer()
    patches = list(replay(raw_log, normalizer))
    return Observed(executor, scenario, normalizer.work_dir or "", patches, normalizer.outcome)


# --- each run alone ------------------------------------------------------------------------------


def run_problems(obs: Observed) -> list[str]:
    """What in one run breaks the one shape."""
    return [
        f"{obs}: {p}"
        for p in (*_status_order(obs), *_approvals(obs), *_paths(obs), *_diffs_once(obs), *_keys(obs))
    ]


def _status_order(obs: Observed) -> Iterator[str]:
    seen: dict[int, list[str]] = {}
    for patch in obs.patches:
        t = patch.entry.type
        if isinstance(t, ToolUse):
            statuses = seen.setdefault(patch.index, [])
            if not statuses or statuses[-1] != t.tool.status:
                statuses.append(t.tool.status)
    for index, statuses in seen.items():
        ranks = [_RANK.get(s, 3) for s in statuses]
        done = [s for s in statuses if s not in _RANK]
        if ranks != sorted(ranks) or len(done) > 1:
            yield f"tool {index} moved {' -> '.join(statuses)}"


def _approvals(obs: Observed) -> Iterator[str]:
    for tool in obs.tools:
        if tool.approval is not None and tool.approval.decision == "pending":
            yield f"{tool.tool_name} ended {tool.status} with its approval still pending"
        if tool.status == "cancelled" and tool.approval is not None and tool.approval.decision == "approved":
            continue  # approved, then the turn was stopped: the approval stands
        if tool.approval is not None and tool.approval.decision == "denied" and not tool.approval.reason:
            yield f"{tool.tool_name} refused without the reason on its entry"


def _inside(path: str, work_dir: str) -> bool:
    return bool(work_dir) and (path == work_dir or path.startswith(work_dir.rstrip("/") + "/"))


def _paths(obs: Observed) -> Iterator[str]:
    header = "/" + obs.work_dir.strip("/") + "/"
    for tool in obs.tools:
        action = tool.action
        paths = []
        if isinstance(action, FileRead | FileWrite | FileEdit):
            paths = action.path.split(", ")
        elif isinstance(action, Search) and action.path:
            paths = [action.path]
        for path in paths:
            if _inside(path, obs.work_dir):
                yield f"{tool.tool_name} path {path} is not relative to {obs.work_dir}"
        if isinstance(action, FileWrite | FileEdit):
            for change in action.changes:
                for line in (change.unified_diff or "").splitlines()[:4]:
                    if line.startswith(("--- ", "+++ ")) and header.lstrip("/") in line:
                        yield f"{tool.tool_name} diff header {line!r} is not relative"


def _diffs_once(obs: Observed) -> Iterator[str]:
    hunks = {
        m.group(0)
        for tool in obs.tools
        if isinstance(tool.action, FileWrite | FileEdit)
        for change in tool.action.changes
        for m in _HUNK.finditer(change.unified_diff or "")
    }
    for entry in obs.entries:
        if isinstance(entry.type, ToolUse):
            continue
        for hunk in hunks:
            if hunk in entry.content:
                yield f"entry {entry.index} ({entry.type.kind}) repeats a file change's diff as text"
                break


def _keys(obs: Observed) -> Iterator[str]:
    for entry in obs.entries:
        meta = entry.to_json_dict().get("metadata") or {}
        bad = [k for k in meta if "_" in k.strip("_") or k == "extra"]
        if bad:
            yield f"entry {entry.index} has metadata keys {bad} (camelCase, at the top level)"
            return


# --- across the agents of one scenario ----------------------------------------------------------


def _main_tool(obs: Observed) -> ToolUseEntry | None:
    kind = SCENARIO_TOOL.get(obs.scenario, (None, None))[0]
    if kind is None:
        return None
    matching = [
        t
        for t in obs.tools
        if t.action.kind == kind or (kind == "file_edit" and t.action.kind == "file_write")
    ]
    return matching[-1] if matching else None


def signature(obs: Observed) -> dict[str, Any]:
    """What must be the same for every agent in ``obs``'s scenario."""
    kinds: list[str] = []
    for e in obs.entries:  # the entry kinds, each run of one kind counted once
        if e.type.kind not in ("system_message", "error") and (not kinds or kinds[-1] != e.type.kind):
            kinds.append(e.type.kind)
    sig: dict[str, Any] = {"outcome": obs.outcome}
    if obs.scenario in ("plain_answer", "follow_up"):
        # Each turn the same shape (a prompt, its answer, its usage), and turns never merged; how
        # many turns a run has depends on how the protocol continues a session (codex exec resumes).
        turns: list[list[str]] = []
        for kind in kinds:
            if kind == "user_message" or not turns:
                turns.append([])
            if kind != "thinking":
                turns[-1].append(kind)
        sig["turn shape"] = sorted({tuple(t) for t in turns})
    if obs.scenario in ("tool_approved", "tool_denied", "file_edit"):
        sig["tool kinds seen"] = sorted(
            {t.action.kind for t in obs.tools} & {"command_run", "file_edit", "file_write"}
        )
    tool = _main_tool(obs)
    if obs.scenario in SCENARIO_TOOL:
        if tool is None:
            sig["tool"] = None
            return sig
        sig["action"] = tool.action.kind
        sig["status"] = tool.status
        sig["approval"] = tool.approval.decision if tool.approval else None
        if tool.approval and tool.approval.decision == "denied":
            sig["reason"] = tool.approval.reason
        if isinstance(tool.action, FileWrite | FileEdit):
            sig["path"] = tool.action.path
            sig["changes"] = [c.type for c in tool.action.changes]
            sig["diff headers"] = [
                line
                for c in tool.action.changes
                for line in (c.unified_diff or "").splitlines()[:2]
                if line.startswith(("--- ", "+++ "))
            ]
    return sig


def _command_output(obs: Observed) -> Iterator[str]:
    word = SCENARIO_TOOL.get(obs.scenario, (None, None))[1]
    tool = _main_tool(obs)
    if word is None or tool is None or tool.status != "success":
        return
    result = getattr(tool.action, "result", None)
    shown = result is not None and word in ((result.stdout or "") + (result.stderr or ""))
    if obs.executor in NO_COMMAND_OUTPUT:
        if shown:
            yield f"{obs}: shows the command's output though NO_COMMAND_OUTPUT says it sends none"
    elif not shown:
        yield f"{obs}: the command's output ({word!r}) is not on its entry"


def cross_agent_problems(observations: Iterable[Observed]) -> list[str]:
    """Where agents disagree on a scenario, as 'scenario: key: value (agents) vs value (agents)'."""
    by_scenario: dict[str, list[Observed]] = {}
    problems: list[str] = []
    for obs in observations:
        by_scenario.setdefault(obs.scenario, []).append(obs)
        problems += _command_output(obs)
    for scenario, group in sorted(by_scenario.items()):
        sigs = {str(o.executor): signature(o) for o in group}
        for key in sorted({k for s in sigs.values() for k in s}):
            values: dict[str, list[str]] = {}
            for executor, sig in sigs.items():
                own = OWN_BEHAVIOUR.get((executor, scenario, key))
                if own is not None and sig.get(key) != own[0]:
                    problems.append(
                        f"{scenario}: {key}: {sig.get(key)!r} ({executor}), not the {own[0]!r} "
                        "OWN_BEHAVIOUR documents: update or drop its entry"
                    )
                elif own is None and (executor, key) not in CANNOT_SAY:
                    values.setdefault(repr(sig.get(key)), []).append(executor)
            if len(values) > 1:
                shown = " vs ".join(
                    f"{v} ({', '.join(sorted(e))})"
                    for v, e in sorted(values.items(), key=lambda x: -len(x[1]))
                )
                problems.append(f"{scenario}: {key}: {shown}")
    return problems
