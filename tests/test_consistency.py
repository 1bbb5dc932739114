"""One shape for one meaning, across every agent (issue 14 point 3): every cell of the conformance
matrix, replayed from its recording in fixtures/conformance, is checked alone and against the other
agents of its scenario.  The cells come from the matrix itself (every executor with a scenario set,
every scenario it can express), so an agent added to the matrix is covered with no edit here: its
recordings are made by `python fixtures/record.py --conformance EXECUTOR`.  The live matrix
(tests/test_conformance.py, real CLIs) runs the same checks on what the CLIs produce today."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrate.entries import (
    ApprovalInfo,
    CommandRun,
    EntryPatch,
    FileChange,
    FileEdit,
    NormalizedEntry,
    SystemMessage,
    ToolUse,
    ToolUseEntry,
)
from orchestrate.testing.conformance import SCENARIOS, conformance_executors, load_scenarios
from orchestrate.testing.consistency import Observed, cross_agent_problems, observe_log, run_problems

from .helpers import FIXTURES

RECORDED = FIXTURES / "conformance"
CELLS = [
    (executor, scenario)
    for executor in conformance_executors()
    for scenario, spec in load_scenarios(executor).items()
    if spec.case is not None
]


def _log(executor: str, scenario: str) -> Path:
    return RECORDED / executor / f"{scenario}.jsonl"


def test_every_cell_of_the_matrix_has_a_recording_fit_to_commit() -> None:
    assert len(CELLS) >= 5 * len(SCENARIOS) - 2
    missing = [f"{e}/{s}" for e, s in CELLS if not _log(e, s).exists()]
    assert missing == [], "record them: python fixtures/record.py --conformance EXECUTOR"
    for path in RECORDED.rglob("*.jsonl"):
        text = path.read_text()
        assert not re.search(r"(?<![\w./-])/(tmp|root|work)/", text), path
        assert "sk-ant" not in text and "sk-test" not in text and "scripted-key" not in text, path


@pytest.fixture(scope="module")
def observed() -> list[Observed]:
    return [observe_log(e, s, _log(e, s)) for e, s in CELLS if _log(e, s).exists()]


def test_each_recorded_cell_keeps_the_one_shape(observed: list[Observed]) -> None:
    assert [p for o in observed for p in run_problems(o)] == []


def test_every_agent_agrees_on_every_scenario(observed: list[Observed]) -> None:
    assert {o.scenario for o in observed} == set(SCENARIOS)
    assert cross_agent_problems(observed) == []


# --- the checks can fail: each kind of disagreement, made on purpose ----------------------------


def _tool(index: int, status: str, **fields: object) -> EntryPatch:
    tool = ToolUseEntry(tool_name="t", action=CommandRun(command="x"), status=status, **fields)  # type: ignore[arg-type]
    return EntryPatch(op="replace", index=index, entry=NormalizedEntry(index=index, type=ToolUse(tool=tool)))


def test_a_status_moving_back_or_a_pending_question_left_behind_is_found() -> None:
    pending = ApprovalInfo(request_id="1")
    obs = Observed(
        "x",
        "tool_approved",
        "/w",
        [
            _tool(0, "running"),
            _tool(0, "pending_approval", approval=pending),
            _tool(0, "cancelled", approval=pending),
        ],
    )
    problems = run_problems(obs)
    assert any("running -> pending_approval" in p for p in problems)
    assert any("still pending" in p for p in problems)
    denied = Observed(
        "x",
        "tool_denied",
        "/w",
        [_tool(0, "denied", approval=ApprovalInfo(request_id="1", decision="denied"))],
    )
    assert any("without the reason" in p for p in run_problems(denied))


def test_an_absolute_path_a_repeated_diff_and_snake_case_metadata_are_found() -> None:
    diff = "--- a/w/notes.txt\n+++ b/w/notes.txt\n@@ -1 +1 @@\n-beta\n+BETA\n"
    edit = ToolUseEntry(
        tool_name="e", action=FileEdit(path="/w/notes.txt", changes=(FileChange(unified_diff=diff),))
    )
    echo = NormalizedEntry(index=1, type=SystemMessage(), content=f"```diff\n{diff}```")
    meta = NormalizedEntry.model_validate(
        {"index": 2, "type": {"kind": "user_message"}, "metadata": {"stop_reason": 1}}
    )
    obs = Observed(
        "x", "file_edit", "/w", [], entries=[NormalizedEntry(index=0, type=ToolUse(tool=edit)), echo, meta]
    )
    problems = run_problems(obs)
    assert any("path /w/notes.txt is not relative" in p for p in problems)
    assert any("diff header" in p for p in problems)
    assert any("repeats a file change's diff" in p for p in problems)
    # (a metadata key read back from JSON is camelCased: the JSON form cannot hold a snake_case one)
    assert not any("metadata keys" in p for p in problems)


def test_agents_that_disagree_on_a_scenario_are_named() -> None:
    def denied(executor: str, reason: str | None) -> Observed:
        approval = ApprovalInfo(request_id="1", decision="denied", reason=reason)
        return Observed(executor, "tool_denied", "/w", [_tool(0, "denied", approval=approval)], "success")

    problems = cross_agent_problems(
        [denied("a", "not in this run"), denied("b", "not in this run"), denied("c", None)]
    )
    assert problems == ["tool_denied: reason: 'not in this run' (a, b) vs None (c)"]


def test_every_golden_fixture_keeps_the_one_shape() -> None:
    from .test_golden import CASES, FOLDERS

    problems = []
    for folder, case in CASES:
        problems += run_problems(observe_log(FOLDERS[folder], case, FIXTURES / folder / f"{case}.jsonl"))
    assert problems == []


def test_a_prompt_written_without_a_newline_is_logged_before_the_answer(tmp_path: Path) -> None:
    """(codex exec and cursor take the prompt on stdin, no newline: the redacting raw log held it
    back until the process exited, so a replay showed the prompt after the answer.)"""
    from orchestrate.process.rawlog import RawLogWriter, read_raw_log
    from orchestrate.process.redact import Redactor

    log = RawLogWriter(tmp_path / "raw.jsonl", {"executor": "codex-exec"}, redactor=Redactor(["sk-secret"]))
    log.chunk("stdin", b"say hello", 1.0)
    log.chunk("stdout", b'{"type":"turn.started"}\n', 2.0)
    log.chunk("stdout", b'{"k":"sk-sec', 3.0)  # (the agent's partial lines are still held whole)
    log.chunk("stdout", b'ret"}\n', 4.0)
    log.close()
    records = list(read_raw_log(tmp_path / "raw.jsonl")[1])
    assert [(r.stream, r.data) for r in records] == [
        ("stdin", b"say hello"),
        ("stdout", b'{"type":"turn.started"}\n'),
        ("stdout", b'{"k":"[REDACTED]"}\n'),
    ]


def test_an_agents_own_behaviour_passes_only_as_documented() -> None:
    """codex-acp's refusal aborts the turn (OWN_BEHAVIOUR): that outcome passes for it alone, and
    the same agent answering like the others, or in a third way, is a problem again."""
    from orchestrate.testing.consistency import OWN_BEHAVIOUR

    def denied(executor: str, outcome: str) -> Observed:
        approval = ApprovalInfo(request_id="1", decision="denied", reason="no")
        return Observed(executor, "tool_denied", "/w", [_tool(0, "denied", approval=approval)], outcome)

    assert OWN_BEHAVIOUR[("codex-acp", "tool_denied", "outcome")][0] == "interrupted"
    others = [denied("a", "success"), denied("b", "success")]
    assert cross_agent_problems([*others, denied("codex-acp", "interrupted")]) == []
    for outcome in ("success", "failed"):
        [problem] = cross_agent_problems([*others, denied("codex-acp", outcome)])
        assert problem.startswith(f"tool_denied: outcome: {outcome!r} (codex-acp), not the 'interrupted'")
    # (another agent interrupted is no exception: the table is by agent)
    assert cross_agent_problems([*others, denied("c", "interrupted")]) == [
        "tool_denied: outcome: 'success' (a, b) vs 'interrupted' (c)"
    ]
