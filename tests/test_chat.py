"""A conversation on a real pseudo-terminal (`orchestrate chat`, `orchestrate run --interactive`) with
the fake Claude agent, the screen read back through a terminal emulator (pyte): after each turn an
input line takes the next message for the same session; Ctrl-C during a turn interrupts it and comes
back to the input, a second Ctrl-C quits; Ctrl-D or Ctrl-C at the input quits; on the way out the
command that resumes the session is printed, and it does resume it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pexpect
import pyte

from .helpers import FAKE_CLAUDE, FAKE_CURSOR, ROOT
from .test_live_view import assert_clean

FAKE = f"{sys.executable} {FAKE_CLAUDE}"
CURSOR = f"{sys.executable} {FAKE_CURSOR}"
COLS, ROWS = 110, 60


def unwrapped(lines: list[str], start: str) -> str:
    """The text from the line starting with ``start`` on, its wrapped lines joined back: a line the
    terminal wrapped is COLS wide, or one less when the wrap fell on a space (the screen's lines come
    without trailing blanks), so that space is put back."""
    at = next(i for i, line in enumerate(lines) if line.startswith(start))
    out = ""
    for line in lines[at:]:
        out += line
        if len(line) < COLS - 1:
            break
        if len(line) == COLS - 1:
            out += " "
    return out


INPUT = "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} ".encode()
SESSION = re.compile(r"session ([0-9a-f-]{36})")


class Chat:
    """`orchestrate ARGS` on a pty of its own, its screen kept by pyte."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "orchestrate", *args],
            cwd=str(tmp_path),
            dimensions=(ROWS, COLS),
            env={**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"},
            timeout=15,
        )
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.ByteStream(self.screen)

    def wait_for(self, pattern: bytes) -> list[str]:
        self.child.expect(pattern)
        self.stream.feed(self.child.before + self.child.after)
        return self.lines()

    def next_input(self) -> list[str]:
        """Wait for the input line; the screen then."""
        return self.wait_for(INPUT)

    def end(self) -> list[str]:
        self.child.expect(pexpect.EOF)
        self.stream.feed(self.child.before)
        self.child.close()
        self.code = self.child.exitstatus if self.child.signalstatus is None else -self.child.signalstatus
        return self.lines()

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display if line.strip()]


def chat(tmp_path: Path, *args: str) -> Chat:
    return Chat(tmp_path, "chat", "-e", "claude-code", "--base-command", FAKE, "--approvals", "auto", *args)


def test_a_conversation_interrupt_follow_up_and_the_command_that_resumes_it(tmp_path: Path) -> None:
    term = chat(tmp_path, "plain")
    first = term.next_input()
    assert "assistant hello from fake claude" in first
    term.child.send("slow\r")
    term.wait_for(rb"w3 ")
    term.child.send("\x03")  # Ctrl-C, as typed: the terminal makes it SIGINT
    after = term.next_input()
    text = "\n".join(after)
    assert "Ctrl-C: interrupting the turn (Ctrl-C again to quit)" in text, text
    words = re.findall(r"\bw(\d+)\b", text)
    assert words and int(words[-1]) < 49  # the turn stopped before its end
    term.child.send("plain\r")  # a follow-up in the same agent process and session
    assert "\n".join(term.next_input()).count("assistant hello from fake claude") == 2
    term.child.send("\x04")  # Ctrl-D at the input: quit
    final = term.end()
    assert term.code == 0
    text = "\n".join(final)
    summary = next(line for line in final if line.startswith("success  session"))
    session = SESSION.search(summary)
    assert session is not None, text
    assert "tokens: 30 in, 15 out" in summary  # three turns' usage
    resume = unwrapped(final, "to continue this conversation: ").split(": ", 1)[1]
    assert resume.endswith(f"--resume {session[1]}")
    assert_clean([line for line in final if not line.startswith((INPUT.decode(), "to continue"))])
    # The printed command continues that session (run here with a plain prompt and no terminal).
    words = shlex.split(resume)
    assert words[:4] == ["orchestrate", "chat", "-e", "claude-code"]
    again = subprocess.run(
        [sys.executable, "-m", "orchestrate", "run", *words[2:], "--approvals", "auto", "plain"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert again.returncode == 0, again.stderr
    assert f"session {session[1]}" in again.stderr


def test_a_second_ctrl_c_quits_and_ctrl_c_at_the_input_quits_too(tmp_path: Path) -> None:
    term = chat(tmp_path, "hang")  # an agent that never answers, not even the interrupt
    term.wait_for(rb"waiting for the model")
    term.child.send("\x03")
    term.wait_for(rb"Ctrl-C again to quit")
    term.child.send("\x03")
    final = term.end()
    assert term.code == 130
    assert any("stopping now" in line for line in final), final
    # At the input, one Ctrl-C is enough; the conversation ended as asked.
    args = ["-e", "claude-code", "--base-command", FAKE, "--approvals", "auto", "-i", "plain"]
    term = Chat(tmp_path, "run", *args)
    term.next_input()
    term.child.send("\x03")
    final = term.end()
    assert term.code == 0
    assert any(line.startswith("success  session") for line in final)
    resume = "to continue this conversation: orchestrate chat -e claude-code"
    assert any(line.startswith(resume) for line in final)


def test_the_first_message_can_be_typed_and_an_empty_line_is_no_message(tmp_path: Path) -> None:
    term = chat(tmp_path)
    term.next_input()
    term.child.send("\r")  # nothing typed: asked again, nothing sent
    term.next_input()
    term.child.send("plain\r")
    screen = term.next_input()
    assert sum(line.startswith("user ") for line in screen) == 1
    assert "assistant hello from fake claude" in screen
    term.child.send("\x04")
    assert term.end() and term.code == 0


def test_a_conversation_by_resume_each_message_a_process_resuming_the_last_session(tmp_path: Path) -> None:
    """cursor-agent -p takes one prompt per process: each message typed starts a new one that
    resumes the session the previous turn reported, in the same view; Ctrl-C interrupts the turn's
    process (SIGINT) and comes back to the input; the resume command at the end is the right one."""
    # "again": the fake answers with its chat id (the --resume argument it got, else a new one).
    term = Chat(tmp_path, "chat", "-e", "cursor", "--base-command", CURSOR, "--approvals", "auto", "again")
    first = "\n".join(term.next_input())
    session = re.search(r"Resumed chat ([0-9a-f-]{36})", first)
    assert session is not None, first
    term.child.send("again\r")
    second = "\n".join(term.next_input())
    assert second.count(f"Resumed chat {session[1]}") == 2, second  # the first turn's still on screen
    assert second.count("user again") == 2
    term.child.send("slow\r")
    term.wait_for(rb"w3 ")
    term.child.send("\x03")  # Ctrl-C: SIGINT to the turn's process, back to the input
    after = "\n".join(term.next_input())
    assert "Ctrl-C: interrupting the turn (Ctrl-C again to quit)" in after, after
    words = re.findall(r"\bw(\d+)\b", after)
    assert words and int(words[-1]) < 150, after  # the turn stopped long before its end
    term.child.send("again\r")  # the interrupted turn's session goes on
    assert "\n".join(term.next_input()).count(f"Resumed chat {session[1]}") == 3
    term.child.send("\x04")
    final = term.end()
    assert term.code == 0, final
    resume = unwrapped(final, "to continue this conversation: ").split(": ", 1)[1]
    assert shlex.split(resume) == [
        "orchestrate",
        "chat",
        "-e",
        "cursor",
        "--base-command",
        CURSOR,
        "--resume",
        session[1],
    ]
    assert_clean([line for line in final if not line.startswith((INPUT.decode(), "to continue"))])
    # The printed command continues that session.
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrate",
            "run",
            *shlex.split(resume)[2:],
            "--approvals",
            "auto",
            "again",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert again.returncode == 0, again.stderr
    assert f"Resumed chat {session[1]}" in again.stdout + again.stderr


def test_a_turn_without_a_session_id_is_said_before_a_fresh_one_starts(tmp_path: Path) -> None:
    term = Chat(
        tmp_path, "chat", "-e", "cursor", "--base-command", CURSOR, "--approvals", "auto", "no-session"
    )
    screen = "\n".join(term.next_input())
    assert "this turn reported no session id: the next message starts a new session" in screen, screen
    term.child.send("again\r")  # a fresh chat: no --resume given, so the fake made a new id
    screen = "\n".join(term.next_input())
    fresh = re.search(r"Resumed chat ([0-9a-f-]{36})", screen)
    assert fresh is not None, screen
    term.child.send("\x03")  # Ctrl-C at the input quits
    final = "\n".join(term.end())
    assert term.code == 0, final
    assert f"--resume {fresh[1]}" in final.replace("\n", "")


def test_an_agent_with_neither_messages_nor_resume_cannot_chat_and_none_without_a_terminal(
    tmp_path: Path,
) -> None:
    argv = [sys.executable, "-m", "orchestrate", "chat", "--approvals", "auto"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    detached = subprocess.run(
        [*argv, "-e", "claude-code", "--base-command", FAKE, "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert detached.returncode == 2 and "needs a terminal" in detached.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "orchestrate", "run", "-e", "claude-code", "--approvals", "auto"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert missing.returncode == 2 and "missing PROMPT" in missing.stderr


def test_ctrl_c_at_a_question_in_a_conversation_stops_the_turn_not_the_conversation(tmp_path: Path) -> None:
    args = ["chat", "-e", "claude-code", "--base-command", FAKE, "--approvals", "ask", "tool"]
    term = Chat(tmp_path, *args)
    term.wait_for(rb"  > ")
    term.child.send("\x03")
    screen = "\n".join(term.next_input())
    assert "(stopped (Ctrl-C): no, and the turn stops)" in screen, screen
    assert "⏺ Shell `echo original` denied" in screen
    term.child.send("tool\r")  # the conversation goes on: the next turn asks again
    term.wait_for(rb"  > ")
    term.child.send("y\r")
    assert "\n".join(term.next_input()).count("ran: echo original") == 1
    term.child.send("\x04")
    final = term.end()
    assert term.code == 0, final


def test_only_an_agent_with_neither_messages_nor_resume_is_refused() -> None:
    """No registered executor lacks both today; the refusal stays for one that does (a plugin)."""
    import click
    import pytest

    from orchestrate.cli.main import _can_converse
    from orchestrate.executors.base import Capabilities

    assert (
        _can_converse("claude-code", Capabilities("jsonl", session_resume=True, mid_execution_messages=True))
        is False
    )
    assert _can_converse("cursor", Capabilities("jsonl", session_resume=True)) is True
    with pytest.raises(click.ClickException) as refused:
        _can_converse("mute", Capabilities("jsonl"))
    assert refused.value.exit_code == 2
    message = refused.value.message
    assert "mute takes one prompt per process and cannot resume its session" in message
    assert "cursor" in message and "claude-code" in message  # the ones that can are named
