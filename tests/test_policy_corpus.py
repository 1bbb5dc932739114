"""The adversarial corpus of the rule policy (tests/data/policy_corpus.toml), run through the
approval pipeline every run installs, plus properties no list of examples can cover."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrate.approvals import ApprovalDecision, ApprovalPipeline, ApprovalRequest, RulePolicy

CORPUS = tomllib.loads((Path(__file__).parent / "data" / "policy_corpus.toml").read_text())
POLICIES: dict[str, dict[str, Any]] = CORPUS["policies"]
COMMANDS: list[dict[str, str]] = CORPUS["corpus"]["commands"]
PATHS: list[dict[str, str]] = CORPUS["corpus"]["paths"]


class Person:
    """The fallback: records that it was asked, and says no."""

    def __init__(self) -> None:
        self.asked: list[ApprovalRequest] = []

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        return ApprovalDecision.deny("asked the person")


def outcome(policy: str, request: ApprovalRequest) -> str:
    person = Person()
    pipeline = ApprovalPipeline(RulePolicy.from_dict(POLICIES[policy], ask=person))
    decision = anyio.run(pipeline.request_approval, request)
    if person.asked:
        return "asked"
    return decision.status


def expectations(case: dict[str, str]) -> list[tuple[str, str]]:
    return [(name, case[name]) for name in POLICIES if name in case]


def test_the_corpus_is_big_enough_and_cannot_be_passed_by_refusing() -> None:
    assert len(COMMANDS) >= 100 and len(PATHS) >= 30
    assert all("readme" in c and "full" in c for c in COMMANDS + PATHS)
    approved = [c for c in COMMANDS if c["readme"] == "approved"]
    assert len(approved) >= 30  # a policy that refuses everything fails all of these
    assert len({c["line"] for c in COMMANDS}) == len(COMMANDS)  # no line twice


@pytest.mark.parametrize("case", COMMANDS, ids=[repr(c["line"])[:60] for c in COMMANDS])
def test_command_line(case: dict[str, str], tmp_path: Path) -> None:
    request = ApprovalRequest(request_id="r", tool_name="Bash", command=case["line"], cwd=str(tmp_path))
    got = {name: outcome(name, request) for name, _ in expectations(case)}
    assert got == dict(expectations(case)), case.get("why", "")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ws")
    for name in CORPUS["workspace"]["files"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    for name, target in CORPUS["workspace"]["symlinks"].items():
        os.symlink(target, root / name)
    return root


@pytest.mark.parametrize("case", PATHS, ids=[f"{c['tool']} {c['path']}" for c in PATHS])
def test_path(case: dict[str, str], workspace: Path) -> None:
    path = case["path"].replace("{ws}", str(workspace))
    request = ApprovalRequest(request_id="r", tool_name=case["tool"], paths=(path,), cwd=str(workspace))
    got = {name: outcome(name, request) for name, _ in expectations(case)}
    assert got == dict(expectations(case)), case.get("why", "")


# --- properties -------------------------------------------------------------------------------

ALLOWED = [
    "git status",
    "git status --short",
    "pytest -q tests/",
    "pytest",
    "git status 2>&1",
    "pytest >/dev/null",
]
DENIED = [
    "rm -rf x",
    "rm -fr /",
    "rm -r -f x",
    "rm --recursive --force x",
    "/bin/rm -Rf ~",
    "\\rm -rf x",
    "sudo x",
    "sudo\tapt install x",
    "env sudo x",
    "FOO=1 rm -rf x",
    "timeout 5 rm -rf x",
]
OPERATORS = [";", " && ", " || ", " | ", " & ", "\n", " ;\n "]


def _nest(line: str, how: int) -> str:
    return [
        line,
        f"( {line} )",
        f"{{ {line}; }}",
        f"echo $( {line} )",
        f"echo `{line}`",
        f"bash -c '{line}'",
        f"cat <( {line} )",
        f"if true; then {line}; fi",
    ][how]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    allowed=st.lists(st.sampled_from(ALLOWED), max_size=3),
    denied=st.sampled_from(DENIED),
    operators=st.lists(st.sampled_from(OPERATORS), min_size=4, max_size=4),
    where=st.integers(min_value=0, max_value=3),
    nest=st.integers(min_value=0, max_value=7),
)
def test_a_denied_command_anywhere_denies_the_line(
    allowed: list[str], denied: str, operators: list[str], where: int, nest: int
) -> None:
    parts = [*allowed]
    parts.insert(min(where, len(parts)), _nest(denied, nest) if "'" not in denied else denied)
    line = parts[0] + "".join(op + part for op, part in zip(operators, parts[1:], strict=False))
    request = ApprovalRequest(request_id="r", tool_name="Bash", command=line, cwd="/tmp")
    for policy in ("readme", "full", "echo"):
        assert outcome(policy, request) == "denied", (policy, line)


@settings(max_examples=200, deadline=None)
@given(
    allowed=st.lists(st.sampled_from(ALLOWED), min_size=1, max_size=4),
    operators=st.lists(st.sampled_from(OPERATORS), min_size=4, max_size=4),
    group=st.booleans(),
)
def test_allowed_commands_joined_by_any_operator_stay_approved(
    allowed: list[str], operators: list[str], group: bool
) -> None:
    line = allowed[0] + "".join(op + part for op, part in zip(operators, allowed[1:], strict=False))
    if group:
        line = f"( {line} )"
    request = ApprovalRequest(request_id="r", tool_name="Bash", command=line, cwd="/tmp")
    assert outcome("readme", request) == "approved", line


@pytest.mark.parametrize(
    "line",
    [
        "$(" * 400 + "rm -rf x" + ")" * 400,
        "(" * 5000 + "x" + ")" * 5000,
        "{ " * 300 + "rm -rf x" + "; }" * 300,
        "x " * 50_000 + "; rm -r -f y",
        "rm -rf x " * 10_000,
        "bash -c " * 50 + "'rm -rf x'",
    ],
    ids=["substitutions", "subshells", "groups", "too-long", "many-words", "nested-scripts"],
)
def test_hostile_sizes_are_bounded_and_refused(line: str) -> None:
    """Deep nesting and huge lines end in a bounded time with a refusal, never an exception (which
    would also refuse, but say nothing useful) and never an approval."""
    request = ApprovalRequest(request_id="r", tool_name="Bash", command=line, cwd="/tmp")
    for policy in ("readme", "full"):
        assert outcome(policy, request) in ("denied", "asked"), policy
    decision = anyio.run(
        RulePolicy.from_dict(POLICIES["full"] | {"fallback": "deny"}).request_approval, request
    )
    assert decision.status == "denied" and len(decision.reason or "") < 400


def test_the_readmes_policy_file_loads_and_is_the_corpus_policy() -> None:
    """The TOML format the README documents keeps working, and the corpus judges the README's own
    policy: the README's example file, loaded as a user's would be, equals the corpus's."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme[readme.index("**A rule policy** (TOML)") :]
    example = section[section.index("```toml\n") + 8 : section.index("```", section.index("```toml\n") + 8)]
    raw = tomllib.loads(example)
    person = Person()
    loaded = RulePolicy.from_dict(raw, ask=person)
    corpus = RulePolicy.from_dict(POLICIES["readme"], ask=person)
    assert (loaded.autonomy, loaded.allow, loaded.deny) == (corpus.autonomy, corpus.allow, corpus.deny)
