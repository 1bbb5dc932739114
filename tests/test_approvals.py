from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from orchestrate.approvals import (
    ApprovalDecision,
    ApprovalRequest,
    AutoApprove,
    AutoDeny,
    RulePolicy,
    SessionMemory,
    decide,
)
from orchestrate.errors import ConfigError

pytestmark = pytest.mark.anyio


def req(tool: str = "Bash", command: str | None = None, paths: tuple[str, ...] = (), read_only: bool = False):
    return ApprovalRequest(
        request_id="r", tool_name=tool, command=command, paths=paths, read_only=read_only, cwd="/repo"
    )


class Boom:
    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        raise RuntimeError("service exploded")


class Slow:
    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        await anyio.sleep(30)
        return ApprovalDecision.approve()


class WrongType:
    async def request_approval(self, request: ApprovalRequest) -> object:
        return True


async def test_builtins() -> None:
    assert (await decide(AutoApprove(), req(), 1)).status == "approved"
    denied = await decide(AutoDeny("nope"), req(), 1)
    assert (denied.status, denied.reason) == ("denied", "nope")


async def test_an_exception_is_a_denial() -> None:
    decision = await decide(Boom(), req(), 1)
    assert decision.status == "denied" and "service exploded" in (decision.reason or "")


async def test_a_timeout_is_timed_out_and_interrupts() -> None:
    with anyio.fail_after(5):
        decision = await decide(Slow(), req(), 0.05)
    assert (decision.status, decision.interrupt) == ("timed_out", True)


async def test_a_non_decision_is_a_denial() -> None:
    assert (await decide(WrongType(), req(), 1)).status == "denied"  # type: ignore[arg-type]


async def test_session_memory_remembers_always() -> None:
    answers = iter([ApprovalDecision.approve(for_session=True)])

    class Once:
        calls = 0

        async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
            self.calls += 1
            return next(answers)

    inner = Once()
    memory = SessionMemory(inner)
    assert (await memory.request_approval(req())).status == "approved"
    assert (await memory.request_approval(req())).status == "approved"
    assert inner.calls == 1
    assert (await SessionMemory(AutoDeny()).request_approval(req("Write"))).status == "denied"


POLICY = """
autonomy = "supervised"
[allow]
tools = ["Read"]
commands = ["git status*", "ls*"]
paths = ["src/**"]
[deny]
commands = ["rm -rf*", "sudo *"]
paths = ["**/.env", "/etc/**"]
"""


@pytest.fixture
def policy(tmp_path: Path) -> RulePolicy:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    return RulePolicy.from_file(path)


@pytest.mark.parametrize(
    ("request_", "status"),
    [
        (req("Read", paths=("/repo/README.md",)), "approved"),
        (req(command="git status --short"), "approved"),
        (req(command="rm -rf /"), "denied"),
        (req(command="sudo apt install x"), "denied"),
        (req(command="make"), "denied"),
        (req("Write", paths=("src/app.py",)), "approved"),
        (req("Write", paths=("/repo/src/deep/x.py",)), "approved"),
        (req("Write", paths=("/repo/docs/x.md",)), "denied"),
        (req("Write", paths=("src/../.env",)), "denied"),
        (req("Edit", paths=("/repo/src/.env",)), "denied"),
        (req("Read", paths=("/etc/passwd",)), "denied"),
        (req(command="ls", paths=("/repo/secret/.env",)), "denied"),
    ],
)
async def test_rule_policy(policy: RulePolicy, request_: ApprovalRequest, status: str) -> None:
    assert (await policy.request_approval(request_)).status == status


async def test_autonomy_levels() -> None:
    readonly = RulePolicy.from_dict({"autonomy": "readonly"})
    assert (await readonly.request_approval(req("Read", read_only=True))).status == "approved"
    assert (await readonly.request_approval(req(command="ls"))).status == "denied"
    full = RulePolicy.from_dict({"autonomy": "full", "deny": {"commands": ["rm*"]}})
    assert (await full.request_approval(req(command="make deploy"))).status == "approved"
    assert (await full.request_approval(req(command="rm x"))).status == "denied"


async def test_fallback_ask() -> None:
    policy = RulePolicy.from_dict({"fallback": "ask"}, ask=AutoApprove())
    assert (await policy.request_approval(req(command="make"))).status == "approved"


@pytest.mark.parametrize(
    "raw",
    [
        {"autonomy": "yolo"},
        {"fallback": "maybe"},
        {"allow": {"tools": "Read"}},
        {"extra": 1},
        {"deny": {"nope": []}},
        {"fallback": "ask"},
    ],
)
def test_bad_policies_are_clear_errors(raw: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        RulePolicy.from_dict(raw)


def test_bad_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("autonomy = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        RulePolicy.from_file(path)
    with pytest.raises(ConfigError, match="cannot read"):
        RulePolicy.from_file(tmp_path / "missing.toml")
