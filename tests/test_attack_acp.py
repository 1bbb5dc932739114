"""Attacks through what an ACP agent asks the client to do (``terminal/create``,
``fs/*``), with the real fake ACP agent, real processes and real files."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from orchestrate.approvals import ApprovalDecision, ApprovalRequest, ApprovalService, RulePolicy
from orchestrate.run import RunResult
from orchestrate.run.confined import openat2_available
from orchestrate.run.workspace import UnsafeFileError, Workspace

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


class SwapWhileAsked:
    """A person who takes a moment to answer, while another process of the agent swaps the
    approved file's directory for a link into ``.git/hooks``; then approves what was shown."""

    def __init__(self, directory: Path, target: Path) -> None:
        self.directory, self.target = directory, target
        self.asked: list[str] = []

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(f"{request.tool_name} {request.paths}")
        if self.directory.is_dir() and not self.directory.is_symlink():
            shutil.rmtree(self.directory)
            self.directory.symlink_to(self.target)
        return ApprovalDecision.approve()


async def test_a_write_lands_where_it_was_approved_not_where_a_swapped_link_leads(tmp_path: Path) -> None:
    """Approved: src/hooks/post-checkout.  Between the question and the write the directory
    becomes a link to .git/hooks: the write must not land in .git (hooks run code), and must
    not be written anywhere the person was not shown."""
    work = tmp_path / "work"
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / "src" / "hooks").mkdir(parents=True)
    person = SwapWhileAsked(work / "src" / "hooks", work / ".git" / "hooks")
    answers, _ = await script(
        work,
        [
            (
                "fs/write_text_file",
                {"path": str(work / "src" / "hooks" / "post-checkout"), "content": "#!/bin/sh\n"},
            )
        ],
        person,
    )
    assert len(person.asked) == 1 and "src/hooks/post-checkout" in person.asked[0]
    assert not (work / ".git" / "hooks" / "post-checkout").exists(), "the write went into .git/hooks"
    assert "error" in answers[0]  # refused: the path changed under it


@pytest.mark.parametrize("use_openat2", [True, False])
@pytest.mark.parametrize("swapped", ["src/hooks", "src/hooks/post-checkout", "src"])
async def test_an_exact_write_follows_no_link_by_either_mechanism(
    tmp_path: Path, use_openat2: bool, swapped: str
) -> None:
    """The write of an approved real path, after a directory (or the file's name) on it became a
    link to .git/hooks: refused by openat2 and by the walk alike, and nothing made in .git."""
    if use_openat2 and not openat2_available():
        pytest.skip("no openat2 here")
    work = tmp_path / "work"
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / "src" / "hooks").mkdir(parents=True)
    (work / "src" / "hooks" / "post-checkout").write_text("old")
    workspace = Workspace(work, use_openat2=use_openat2)
    real = workspace.resolve("src/hooks/post-checkout")
    (work / swapped).rename(tmp_path / "moved")
    target = work / ".git" / "hooks" / ("post-checkout" if swapped.endswith("checkout") else "")
    (work / swapped).symlink_to(target if swapped != "src" else work / ".git")
    with pytest.raises(UnsafeFileError, match="link is in the way"):
        await workspace.write_text(str(real), "#!/bin/sh\n", exact=True)
    assert sorted(p.name for p in (work / ".git" / "hooks").iterdir()) == []


class _Recorder:
    """Approves everything and keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[ApprovalRequest] = []

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        return ApprovalDecision.approve()


async def test_an_approved_diff_grants_only_its_content_not_any_write_to_the_path(tmp_path: Path) -> None:
    """Attack: a permission for an edit shows a harmless diff and names the file in its locations;
    the person approves; the write that follows carries other content.  The person approved what
    they saw, so other content is asked (a location-only grant is for calls that show no diff)."""
    target = tmp_path / "app.py"
    target.write_text("x = 1\n")
    shown = {"type": "diff", "path": str(target), "oldText": "x = 1\n", "newText": "x = 2\n"}
    permission = (
        "session/request_permission",
        {
            "options": [{"optionId": "once", "name": "Allow", "kind": "allow_once"}],
            "toolCall": {
                "toolCallId": "edit_1",
                "title": "edit app.py",
                "kind": "edit",
                "content": [shown],
                "locations": [{"path": str(target)}],
            },
        },
    )
    service = _Recorder()
    answers, _ = await script(
        tmp_path,
        [permission, ("fs/write_text_file", {"path": str(target), "content": "import os; os.system('x')\n"})],
        service,
    )
    assert all("error" not in answer for answer in answers)
    assert [r.tool_name for r in service.asked] == ["edit app.py", "fs/write_text_file"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LC_ALL", "/tmp/evil"),
        ("LANGUAGE", "../../../../tmp/evil"),
        ("TERM", "../../tmp/evil"),
        ("TZ", "/tmp/z"),
    ],
)
def test_a_safe_variable_holding_a_path_is_shown_and_judged(name: str, value: str) -> None:
    """Attack: LC_ALL=/tmp/evil (glibc loads locale data from that path), LANGUAGE=../../x (gettext
    catalogs: translated format strings), TERM=../x (terminfo) are on the harmless list by name,
    so they were applied unseen.  A value that is not a plain name is shown in front of the command,
    and an allow rule no longer approves it."""
    from orchestrate.run.terminals import judged_command

    line = judged_command(
        "git status", None, {name: value, "LANG": "C.UTF-8", "TERM": "xterm-256color"} | {name: value}
    )
    assert line.startswith(f"{name}=") and line.endswith("git status")
    assert (
        judged_command("git status", None, {"LANG": "C.UTF-8", "TERM": "xterm-256color", "TZ": "UTC"})
        == "git status"
    )
    policy = RulePolicy.from_dict({"allow": {"commands": ["git status*"]}})
    request = ApprovalRequest(request_id="r", tool_name="terminal", command=line)
    import anyio

    assert anyio.run(policy.request_approval, request).status == "denied"


class _SwapsWhileAsked:
    """The person takes a moment to answer; meanwhile the agent swaps the command's working
    directory for a link to outside.  Then the person approves what they were shown."""

    def __init__(self, sub: Path, outside: Path) -> None:
        self.sub, self.outside = sub, outside

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        self.sub.rename(self.sub.with_name("sub-moved"))
        self.sub.symlink_to(self.outside)
        return ApprovalDecision.approve()


async def test_a_terminals_directory_swapped_while_the_person_answers_stays_the_approved_one(
    tmp_path: Path,
) -> None:
    """Attack: terminal/create in workspace/sub is asked ("in workspace/sub"); while the question
    is open the agent replaces sub with a symlink to a directory outside, so the approved command
    ran outside the workspace.  The directory is held open from the check to the spawn: the
    command runs in the directory that was approved, wherever its name now leads."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "sub").mkdir(parents=True)
    outside.mkdir()
    answers, _ = await script(
        work,
        [
            ("terminal/create", {"command": "pwd -P; touch planted", "cwd": str(work / "sub")}),
            ("terminal/wait_for_exit", {"terminalId": "$0"}),
            ("terminal/output", {"terminalId": "$0"}),
        ],
        _SwapsWhileAsked(work / "sub", outside),
    )
    assert list(outside.iterdir()) == []
    assert answers[2]["result"]["output"] == f"{(work / 'sub-moved').resolve()}\n"
    assert (work / "sub-moved" / "planted").exists()


async def test_a_read_of_a_path_a_deny_rule_forbids_is_refused(tmp_path: Path) -> None:
    """Attack: with deny paths ["**/.env"], an ACP agent reads .env (or a link to it) through
    fs/read_text_file, which no rule looked at: everything an agent can make us do goes through
    the rules.  Judged on the file actually opened, so a link swapped in after a check cannot
    carry the read there either; other files still read."""
    (tmp_path / ".env").write_text("API_TOKEN=do-not-leak\n")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "settings").symlink_to("../.env")
    (tmp_path / "app.py").write_text("print('ok')\n")
    policy = RulePolicy.from_dict({"autonomy": "full", "deny": {"paths": ["**/.env"]}})
    answers, _ = await script(
        tmp_path,
        [
            ("fs/read_text_file", {"path": str(tmp_path / ".env")}),
            ("fs/read_text_file", {"path": str(tmp_path / "config" / "settings")}),
            ("fs/read_text_file", {"path": str(tmp_path / "app.py")}),
        ],
        policy,
    )
    assert "do-not-leak" not in orjson.dumps(answers).decode()
    assert all("refused" in a["error"]["message"] for a in answers[:2])
    assert answers[2]["result"]["content"] == "print('ok')\n"
