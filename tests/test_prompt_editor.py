"""`e` at the approval question: the proposed input opened in $EDITOR (a scripted one here, a small
shell script that edits the file it is given), approved as changed; offered only where the agent
runs the tool with the changed input; an editor that fails, or leaves the file empty or unchanged,
approves nothing and the question is asked again; the file is private and gone afterwards; and a
hard deny rule still refuses a changed command it forbids."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import anyio
import pexpect
import pytest

from orchestrate import Run, Task
from orchestrate.approvals import ApprovalDecision, ApprovalRequest, RulePolicy, TerminalPrompt
from orchestrate.approvals.editor import editable
from orchestrate.entries import CommandRun, ToolUse

from .helpers import ROOT, fake_claude
from .test_prompt import Person, asked

pytestmark = pytest.mark.anyio


def scripted_editor(tmp_path: Path, body: str) -> Path:
    """An $EDITOR: logs the file it got (path and mode), then runs ``body`` on it ("$1")."""
    script = tmp_path / "editor.sh"
    log = tmp_path / "editor.log"
    script.write_text(f'#!/bin/sh\necho "$1 $(stat -c %a "$1")" >> {log}\n{body}\n')
    script.chmod(0o755)
    return script


def edited_files(tmp_path: Path) -> list[tuple[str, str, bool]]:
    """Each file the editor was given: its path, its mode then, and whether it is still there."""
    log = tmp_path / "editor.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [(path, mode, Path(path).exists()) for path, mode in (line.rsplit(" ", 1) for line in lines)]


@pytest.fixture
def pty_prompt() -> tuple[TerminalPrompt, Person]:  # type: ignore[misc]
    master, slave = os.openpty()
    prompt = TerminalPrompt(input=slave, output=slave)
    yield prompt, Person(keys=master, screen=master)
    prompt.close()
    os.close(master)
    os.close(slave)


def bash(command: str, editable: bool = True) -> ApprovalRequest:
    return ApprovalRequest(
        request_id="r",
        tool_name="Bash",
        tool_input={"command": command, "description": "say it"},
        command=command,
        editable=editable,
    )


async def ask(
    prompt: TerminalPrompt, person: Person, request: ApprovalRequest, *keys: str
) -> tuple[ApprovalDecision, str]:
    decisions: list[ApprovalDecision] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(asked, prompt, request, decisions)
        shown = await person.question()
        for key in keys:
            person.type(key)
            if key.startswith("e"):
                shown += await person.sees("> ") if "again" in await _next(person) else ""
    return decisions[0], shown + person.shown_so_far()


async def _next(person: Person) -> str:
    """What the prompt says after an edit: approved, or why not (and the answer line again)."""
    with anyio.fail_after(10):
        while b"approved as you changed it" not in person.seen and b"answer again" not in person.seen:
            await anyio.wait_readable(person.screen)
            person._take()
    return person.seen.decode("utf-8", "replace")


async def test_e_approves_the_command_as_the_person_changed_it(
    tmp_path: Path, pty_prompt: tuple[TerminalPrompt, Person], monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt, person = pty_prompt
    monkeypatch.setenv("EDITOR", str(scripted_editor(tmp_path, "sed -i 's/original/edited/' \"$1\"")))
    monkeypatch.delenv("VISUAL", raising=False)
    decision, shown = await ask(prompt, person, bash("echo original"), "e\n")
    assert "[e] edit, then yes" in shown
    assert decision.status == "approved" and not decision.for_session
    assert decision.updated_input == {"command": "echo edited", "description": "say it"}
    assert "approved as you changed it:" in shown and "│ echo edited" in shown
    [(path, mode, left)] = edited_files(tmp_path)
    assert path.endswith(".sh") and mode == "600"  # private, and named for what it holds
    assert not left  # removed afterwards


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("exit 3", "the editor exited with code 3"),
        (': > "$1"', "the file was left empty"),
        ("true", "nothing was changed"),
    ],
)
async def test_an_edit_that_gives_nothing_approves_nothing_and_asks_again(
    tmp_path: Path,
    pty_prompt: tuple[TerminalPrompt, Person],
    monkeypatch: pytest.MonkeyPatch,
    body: str,
    why: str,
) -> None:
    prompt, person = pty_prompt
    monkeypatch.setenv("VISUAL", str(scripted_editor(tmp_path, body)))
    decision, shown = await ask(prompt, person, bash("echo original"), "e\n", "n\nno edit\n")
    assert f"nothing approved: {why}; answer again" in shown
    assert decision.status == "denied" and decision.reason == "no edit"
    [(_, _, left)] = edited_files(tmp_path)
    assert not left


async def test_an_editor_that_cannot_start_approves_nothing(
    tmp_path: Path, pty_prompt: tuple[TerminalPrompt, Person], monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt, person = pty_prompt
    monkeypatch.setenv("VISUAL", str(tmp_path / "no-such-editor"))
    decision, shown = await ask(prompt, person, bash("echo original"), "e\n", "y\n")
    assert "nothing approved: could not start the editor" in shown
    assert decision.status == "approved" and decision.updated_input is None  # the later plain "y"


async def test_e_is_not_offered_where_the_agent_would_ignore_a_changed_input(
    tmp_path: Path, pty_prompt: tuple[TerminalPrompt, Person], monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt, person = pty_prompt
    monkeypatch.setenv("VISUAL", str(scripted_editor(tmp_path, "sed -i 's/a/b/' \"$1\"")))
    decisions: list[ApprovalDecision] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(asked, prompt, bash("echo original", editable=False), decisions)
        shown = await person.question()
        person.type("e\n")
        shown += await person.sees("please answer one of")
        person.type("y\n")
    assert "[e]" not in shown
    assert decisions[0].status == "approved" and decisions[0].updated_input is None
    assert edited_files(tmp_path) == []  # no editor was started


def test_what_is_edited_for_each_kind_of_input() -> None:
    write = ApprovalRequest(
        request_id="w", tool_name="Write", tool_input={"file_path": "/w/app.py", "content": "x = 1"}
    )
    part = editable(write)
    assert (part.field, part.text, part.suffix) == ("content", "x = 1", ".py")
    assert part.apply(write, "x = 2\n") == {"file_path": "/w/app.py", "content": "x = 2"}
    other = ApprovalRequest(request_id="o", tool_name="mcp__gh__issue", tool_input={"title": "t"})
    part = editable(other)
    assert part.field is None and part.suffix == ".json"
    assert part.apply(other, '{"title": "u"}') == {"title": "u"}
    for bad, why in (("[1]", "JSON object"), ("{", "not valid JSON"), (part.text, "nothing was changed")):
        with pytest.raises(Exception, match=why):
            part.apply(other, bad)


async def test_a_hard_deny_rule_refuses_a_command_changed_into_one_it_forbids(tmp_path: Path) -> None:
    """The person's change goes through the deny rules like the proposed call did."""

    class Changes:
        def __init__(self, command: str) -> None:
            self.command = command

        async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
            assert request.editable
            return ApprovalDecision.approve({**request.tool_input, "command": self.command})

    for command, allowed in (("echo edited", True), ("rm -rf /tmp/x", False)):
        policy = RulePolicy.from_dict(
            {"autonomy": "supervised", "fallback": "ask", "deny": {"commands": ["rm -rf*"]}},
            ask=Changes(command),
        )
        with anyio.fail_after(20):
            async with Run(fake_claude(), Task(prompt="tool", cwd=tmp_path), policy) as run:
                result = await run.wait()
        [tool] = [e.type.tool for e in result.entries if isinstance(e.type, ToolUse)]
        assert tool.status == ("success" if allowed else "denied"), tool
        # a command that never ran has no result at all (the seed's exitCode is there whenever one is)
        result = tool.action.result if isinstance(tool.action, CommandRun) else None
        assert (result.stdout if result else None) == ("ran: echo edited" if allowed else None), tool
        if not allowed:
            assert tool.approval is not None and "rm -rf" in (tool.approval.reason or "")


def test_e_on_a_real_terminal_the_agent_runs_the_changed_command(tmp_path: Path) -> None:
    """`orchestrate run` on a pty with a scripted $EDITOR: the fake agent reports what it ran."""
    editor = scripted_editor(tmp_path, "sed -i 's/original/changed by a person/' \"$1\"")
    fake = f"{sys.executable} {ROOT / 'fixtures' / 'bin' / 'fake_claude.py'}"
    argv = ["-m", "orchestrate", "run", "-e", "claude-code", "--base-command", fake, "--cwd", str(tmp_path)]
    child = pexpect.spawn(
        sys.executable,
        [*argv, "--approvals", "ask", "tool"],
        env={**os.environ, "PYTHONPATH": str(ROOT), "EDITOR": str(editor), "NO_COLOR": "1"},
        dimensions=(50, 120),
        timeout=20,
    )
    child.expect(r"\[e\] edit, then yes")
    child.expect("  > ")
    child.send("e\r")
    child.expect(pexpect.EOF)
    child.close()
    out = child.before.decode("utf-8", "replace")
    assert child.exitstatus == 0, out
    assert "approved as you changed it:" in out
    assert re.search(r"ran: echo changed by a person", out), out
    assert "ran: echo original" not in out
    [(_, mode, left)] = edited_files(tmp_path)
    assert mode == "600" and not left


LEFTOVERS = r"""
import os, sys, threading, anyio
from orchestrate import Run, Task
from orchestrate.approvals import TerminalPrompt
from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.claude_code import ClaudeCodeExecutor

def fds():
    return sorted(os.listdir("/proc/self/fd"))

async def person(master, answers):
    seen = b""
    for answer in answers:
        while seen.count(b"  > ") < 1:
            await anyio.wait_readable(master)
            seen += os.read(master, 65536)
        seen = seen[seen.index(b"  > ") + 4:]
        os.write(master, answer)

async def main(cwd, answers):
    master, slave = os.openpty()
    before = fds()
    prompt = TerminalPrompt(input=slave, output=slave)
    agent = ClaudeCodeExecutor(ExecutorOptions(base_command=[sys.executable, sys.argv[1]]))
    async with anyio.create_task_group() as tg:
        tg.start_soon(person, master, answers)
        async with Run(agent, Task(prompt="tool tool", cwd=cwd), prompt) as run:
            result = await run.wait()
        tg.cancel_scope.cancel()
    prompt.close()
    ran = [e.type.tool.action.result.stdout for e in result.entries if e.type.kind == "tool_use"]
    print("RAN", ran)
    print("FDS", sorted(set(fds()) ^ set(before)))
    print("THREADS", [t.name for t in threading.enumerate()])

anyio.run(main, sys.argv[2], [a.encode() for a in sys.argv[3:]])
"""


@pytest.mark.parametrize("answers", [["y\n"], ["e\n"]], ids=["yes", "edit"])
def test_no_thread_or_descriptor_is_left_after_a_prompt_run(tmp_path: Path, answers: list[str]) -> None:
    """A whole run in a fresh interpreter, its approval answered on a pty (and through the editor):
    afterwards the same descriptors are open as before, and only the main thread is left."""
    import subprocess

    editor = scripted_editor(tmp_path, "sed -i 's/original/edited/' \"$1\"")
    fake = str(ROOT / "fixtures" / "bin" / "fake_claude.py")
    done = subprocess.run(
        [sys.executable, "-c", LEFTOVERS, fake, str(tmp_path), *answers],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), "EDITOR": str(editor)},
    )
    assert done.returncode == 0, done.stderr
    out = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert out["RAN"] == repr(["ran: echo edited" if answers == ["e\n"] else "ran: echo original"])
    assert out["FDS"] == "[]", done.stdout
    assert out["THREADS"] == "['MainThread']", done.stdout
