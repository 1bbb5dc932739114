"""The live view of `orchestrate run` on a real pseudo-terminal, read back through a terminal emulator
(pyte, as the terminal executor reads an agent's screen): one line per tool, a status line that says
what is happening, no markup and nothing left behind; the approval prompt never drawn over; and the same
run with stdout redirected gives plain lines.  The view's pieces are also checked on their own, with a
clock of the test's."""

from __future__ import annotations

import io
import os
import re
import shlex
import signal
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pexpect
import pyte
import pytest
from rich.console import Console

from orchestrate.cli.live import LiveView
from orchestrate.entries import (
    AssistantMessage,
    CommandResult,
    CommandRun,
    EntryMetadata,
    EntryPatch,
    ErrorEntry,
    ErrorInfo,
    NormalizedEntry,
    TokenUsage,
    TokenUsageEntry,
    ToolUse,
    ToolUseEntry,
)

from .helpers import FAKE_CLAUDE, ROOT, needs_cli

FAKE = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLAUDE))}"
COLS, ROWS = 100, 60  # tall enough that nothing scrolls off: the screen is the whole run
SPINNER = re.compile("[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]")
MARKUP = re.compile(r"\[/?(red|green|yellow|bold|dim|cyan|magenta|blue)[^\]]*\]|\[/\]")


class Terminal:
    """`orchestrate run` on a pty of its own (its controlling terminal: the prompt's /dev/tty too)."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        argv = ["-m", "orchestrate", "run", "-e", "claude-code", "--base-command", FAKE]
        argv += ["--cwd", str(tmp_path)]
        self.child = pexpect.spawn(
            sys.executable,
            [*argv, *args],
            dimensions=(ROWS, COLS),
            env={**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", **(env or {})},
            timeout=15,
        )
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""

    def _take(self, data: bytes) -> None:
        self.raw += data
        self.stream.feed(data)

    def wait_for(self, pattern: str) -> list[str]:
        """Read until ``pattern`` (a regex on the bytes) was written; the screen at that moment."""
        self.child.expect(pattern.encode())
        self._take(self.child.before + self.child.after)
        return self.lines()

    def end(self) -> list[str]:
        """Read to the end; the final screen.  The exit status is in :attr:`code`."""
        self.child.expect(pexpect.EOF)
        self._take(self.child.before)
        self.child.close()
        self.code = self.child.exitstatus if self.child.signalstatus is None else -self.child.signalstatus
        return self.lines()

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display if line.strip()]


def screen_text(lines: list[str]) -> str:
    return "\n".join(lines)


def assert_clean(lines: list[str]) -> None:
    """No markup, no spinner or status line left over, the cursor shown again."""
    text = screen_text(lines)
    assert not MARKUP.search(text), text
    assert not SPINNER.search(text), text
    assert " · " not in text, text  # the status line's separators


def test_a_tool_through_ask_the_prompt_is_never_drawn_over(tmp_path: Path) -> None:
    term = Terminal(tmp_path, "--approvals", "ask", "tool")
    asked = term.wait_for(r"  > ")
    # The question is on the screen and the live region is not: held still while it is open.
    assert any("wants to run" in line for line in asked)
    assert not SPINNER.search(screen_text(asked)), screen_text(asked)
    term.child.send("y\r")
    final = term.end()
    assert term.code == 0
    text = screen_text(final)
    shell = [line for line in final if line.startswith("⏺ ")]
    assert len(shell) == 1 and re.fullmatch(r"⏺ Shell `echo original` success \d+\.\ds", shell[0]), text
    assert "  │ ran: echo original" in final
    assert "assistant tool done" in final
    assert any(line.startswith("success  session ") for line in final), text
    assert_clean(final)
    assert term.raw.rstrip().count(b"\x1b[?25h") >= 1  # the cursor given back


def test_the_status_line_shows_retries_and_then_clears(tmp_path: Path) -> None:
    term = Terminal(tmp_path, "--approvals", "auto", "overloaded")
    during = term.wait_for(r"retrying \(attempt 2")
    term.wait_for(r"\d\.\ds")  # the rest of that status line: its clock
    status = [line for line in term.lines() if "retrying" in line]
    assert len(status) == 1, term.lines()
    assert re.match(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] retrying \(attempt 2 of 10, in 0\.4 s\): API error 529 · \d", status[0])
    assert "assistant hello" not in screen_text(during)  # seen live, before the answer
    final = term.end()
    assert term.code == 0
    assert "assistant hello from fake claude" in final
    assert not any("retrying" in line for line in final)
    assert any(line.startswith("success  session") and "tokens: 10 in, 5 out" in line for line in final)
    assert_clean(final)


def test_streamed_text_is_shown_as_it_grows(tmp_path: Path) -> None:
    term = Terminal(tmp_path, "--approvals", "auto", "slow")
    term.wait_for(r"w3 ")
    early = term.wait_for(r"writing\S* · \S*\d\.\ds")  # the region drawn after it, to its clock
    # Mid-stream: the words so far on the growing line, and a status line saying what is going on.
    assert any(line.startswith("assistant w0 w1 w2 w3") for line in early), early
    assert any(re.match(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] writing · \d", line) for line in early), early
    final = term.end()
    words = " ".join(line for line in final if not line.startswith(("success", "tokens", "user", "Session")))
    # (whole words: the raw log's path wraps onto lines of its own, and pytest-xdist's is .../popen-gw0/...)
    assert re.findall(r"\bw\d+\b", words) == [f"w{i}" for i in range(50)]  # each word once, in order
    assert_clean(final)


def test_a_failed_run_shows_its_reason_without_markup(tmp_path: Path) -> None:
    term = Terminal(tmp_path, "--approvals", "auto", "crash")
    final = term.end()
    assert term.code not in (0, None)
    text = screen_text(final)
    assert any(line.startswith("failed  session") for line in final), text
    assert "assistant about to crash" in text
    assert_clean(final)


def test_a_retry_then_a_failure_ends_with_its_reason_in_one_line(tmp_path: Path) -> None:
    term = Terminal(tmp_path, "--approvals", "auto", "api-error", env={"FAKE_API_ERROR": "refused"})
    term.wait_for(r"retrying \(attempt 1 of 1, in 0\.1 s\): unknown")
    final = term.end()
    assert term.code == 1
    assert not any("retrying" in line for line in final)  # the status line is gone with the region
    # The last thing said, one logical line (the terminal wraps it at 100 columns).
    reason = "".join(final[next(i for i, line in enumerate(final) if line.startswith("model unreachable")) :])
    assert reason.startswith("model unreachable: API Error: Connection refused"), final
    assert reason.endswith(" — check the network, or the base URL the agent is given"), final
    assert_clean(final)


def test_ctrl_c_at_a_question_stops_with_130_and_leaves_a_clean_screen(tmp_path: Path) -> None:
    term = Terminal(tmp_path, "--approvals", "ask", "tool")
    term.wait_for(r"  > ")
    term.child.kill(signal.SIGINT)
    final = term.end()
    assert term.code == 130
    text = screen_text(final)
    assert "Ctrl-C: interrupting" in text and "(stopped (Ctrl-C): no, and the turn stops)" in text, text
    assert any(line.startswith("interrupted  session") for line in final), text
    assert_clean(final)


def test_no_color_is_honoured_on_a_terminal(tmp_path: Path) -> None:
    term = Terminal(tmp_path, "--approvals", "deny", "tool", env={"NO_COLOR": "1"})
    final = term.end()
    assert term.code == 0
    assert "⏺ Shell `echo original` denied" in screen_text(final)
    assert not re.search(rb"\x1b\[[0-9;]*(3[0-9]|9[0-7])(;[0-9;]*)?m", term.raw)  # no colour codes


def test_the_same_run_redirected_gives_plain_lines(tmp_path: Path) -> None:
    # stdout a file, the terminal still there for the rest: the run prints plain lines.
    out = tmp_path / "out.txt"
    command = f"{shlex.quote(sys.executable)} -m orchestrate run -e claude-code"
    command += f" --base-command {shlex.quote(FAKE)}"
    command += f" --cwd {shlex.quote(str(tmp_path))} --approvals deny tool > {shlex.quote(str(out))}"
    child = pexpect.spawn("/bin/sh", ["-c", command], env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=15)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    plain = out.read_bytes()
    assert b"\x1b" not in plain and b"\r" not in plain
    lines = plain.decode().splitlines()
    assert "⏺ Shell `echo original` pending approval" in lines
    assert "⏺ Shell `echo original` denied" in lines
    assert "assistant tool done" in lines


# --- the view's pieces, on a console of the test's ---------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def entry(index: int, type_: object, content: str = "", **extra: object) -> EntryPatch:
    meta = EntryMetadata(extra=extra) if extra else None
    e = NormalizedEntry(index=index, timestamp=datetime.now(UTC), type=type_, content=content, metadata=meta)  # type: ignore[arg-type]
    return EntryPatch(op="add", index=index, entry=e)


def shell(status: str, output: str | None = None) -> ToolUse:
    result = CommandResult(exit_code=0, stdout=output) if output is not None else None
    action = CommandRun(command="ls", result=result)
    return ToolUse(tool=ToolUseEntry(tool_name="run_shell_command", action=action, status=status))  # type: ignore[arg-type]


@pytest.fixture
def view() -> Iterator[tuple[LiveView, io.StringIO, Clock]]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system=None, highlight=False)
    clock = Clock()
    live = LiveView(console, clock=clock)
    with live:
        yield live, out, clock


def region(live: LiveView) -> list[str]:
    console = Console(file=io.StringIO(), width=80, color_system=None)
    with console.capture() as cap:
        console.print(live.region())
    return cap.get().splitlines()


def test_one_line_per_tool_in_flight_and_what_the_status_line_says(
    view: tuple[LiveView, io.StringIO, Clock],
) -> None:
    live, out, clock = view
    assert region(live)[-1].endswith("starting · 0.0s")
    live.on_patch(entry(0, shell("pending_approval"), "`ls`"))
    clock.now += 2.5
    rows = region(live)
    assert len(rows) == 2 and rows[0][2:] == "⏺ Shell `ls` pending approval 2.5s"
    assert rows[1][2:] == "waiting for approval: Shell `ls` · 2.5s"
    live.on_patch(entry(0, shell("running"), "`ls`"))
    live.on_patch(entry(1, shell("running"), "`pwd`"))
    rows = region(live)
    assert [r[2:] for r in rows[:2]] == ["⏺ Shell `ls` running 2.5s", "⏺ Shell `pwd` running 0.0s"]
    clock.now += 1
    live.on_patch(entry(0, shell("success", "a\nb"), "`ls`"))
    assert "⏺ Shell `ls` success 3.5s\n  │ a\n  │ b\n" in out.getvalue()
    assert [r[2:] for r in region(live)[:1]] == ["⏺ Shell `pwd` running 1.0s"]
    raw = {"attempt": 3, "max_retries": 10, "retry_delay_ms": 5000, "error_status": 529}
    live.on_patch(entry(2, ErrorEntry(error=ErrorInfo(message="x", code="api_retry")), "x", raw=raw))
    assert region(live)[-1][2:].startswith("retrying (attempt 3 of 10, in 5.0 s): API error 529 · ")
    usage = TokenUsage(input_tokens=1200, output_tokens=300, total_cost_usd=0.25)
    live.on_patch(entry(3, AssistantMessage(), "hi"))
    live.on_patch(entry(4, TokenUsageEntry(usage=usage)))
    assert region(live)[-1].endswith("· 1.5k tokens · $0.2500")
    assert out.getvalue().count("⏺ Shell `ls` success") == 1  # printed once, when it settled


def test_holding_the_view_keeps_lines_back_and_clears_the_region(
    view: tuple[LiveView, io.StringIO, Clock],
) -> None:
    live, out, _ = view
    live.on_patch(entry(0, shell("pending_approval"), "`ls`"))
    with live.hold():
        before = out.getvalue()
        live.on_patch(entry(0, shell("success", "held"), "`ls`"))
        live.refresh()
        assert out.getvalue() == before  # nothing drawn while a question is open
    assert "  │ held" in out.getvalue()[len(before) :]


# --- the screen the README shows ------------------------------------------------------------------

SCREENS = ROOT / "fixtures" / "screens"


def _steady(lines: list[str], tmp_path: Path) -> str:
    """The screen with what changes from run to run (ids, times, paths) put in words."""
    text = "\n".join(lines).replace(str(tmp_path), "WORKDIR")
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "SESSION", text)
    text = re.sub(r"raw log .*", "raw log RAW_LOG", text, flags=re.S)  # the last thing, wrapped
    return re.sub(r"\b\d+\.\ds\b", "0.1s", text) + "\n"


def test_the_screen_of_a_run_with_an_approval_is_the_one_the_readme_links(tmp_path: Path) -> None:
    """fixtures/screens/run-with-approval.txt is this screen (ORCHESTRATE_WRITE_SCREENS=1 rewrites it)."""
    term = Terminal(tmp_path, "--approvals", "ask", "tool")
    term.wait_for(r"  > ")
    term.child.send("y\r")
    screen = _steady(term.end(), tmp_path)
    saved = SCREENS / "run-with-approval.txt"
    if os.environ.get("ORCHESTRATE_WRITE_SCREENS") == "1":
        saved.parent.mkdir(exist_ok=True)
        saved.write_text(screen)
    assert screen == saved.read_text()


def _steady_demo(lines: list[str]) -> str:
    """The demo's screen with what changes from run to run put in words: ids, the scratch folder,
    times, and the token counts (they follow the CLI's system prompt, which holds the date)."""
    text = re.sub(r"/tmp/orchestrate-demo-[^/\s]+", "/tmp/orchestrate-demo-SCRATCH", "\n".join(lines))
    text = re.sub(r"tokens: \d+ in, \d+ out, \$[\d.]+", "tokens: N in, N out, $COST", text)
    return _steady(text.splitlines(), Path("/nonexistent"))


@pytest.mark.real_cli
@needs_cli("claude")
def test_the_screen_of_the_demo_is_the_one_the_readme_links(tmp_path: Path) -> None:
    """fixtures/screens/demo.txt is `orchestrate demo` on a terminal: the real Claude Code CLI against
    the scripted model (ORCHESTRATE_WRITE_SCREENS=1 rewrites it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "ORCHESTRATE_HOME": str(tmp_path)}
    argv = ["-m", "orchestrate", "demo"]
    child = pexpect.spawn(sys.executable, argv, dimensions=(ROWS, COLS), env=env, timeout=90)
    child.expect(pexpect.EOF)
    child.close()
    screen = pyte.Screen(COLS, ROWS)
    pyte.ByteStream(screen).feed(child.before)
    lines = [line.rstrip() for line in screen.display if line.strip()]
    assert child.exitstatus == 0, lines
    assert_clean(lines)
    steady = _steady_demo(lines)
    saved = SCREENS / "demo.txt"
    if os.environ.get("ORCHESTRATE_WRITE_SCREENS") == "1":
        saved.write_text(steady)
    assert steady == saved.read_text()
