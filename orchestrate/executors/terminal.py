"""Agents that only have a text UI, driven through a pseudo-terminal: any, by its command, with
generic rules, and Claude Code's interactive UI with its own."""

from __future__ import annotations

import re
from typing import ClassVar

from ..normalizers.terminal_screen import TerminalScreenNormalizer
from ..normalizers.tui import TuiRules
from ..task import Task
from .base import Capabilities, Executor

__all__ = ["CLAUDE_TUI", "GENERIC_TUI", "ClaudeCodeTuiExecutor", "TerminalExecutor"]

GENERIC_TUI = TuiRules(
    name="generic",
    ready=re.compile(r"\S"),
    # borders and empty input boxes, an input line, and the usual status-line hints
    chrome=(
        re.compile(r"^[\s─━═│┃╭╮╰╯┌┐└┘>]*$"),
        re.compile(r"^\s*>\s"),
        re.compile(r"for shortcuts|esc to interrupt|ctrl\+c to", re.I),
    ),
    # "Run `cmd`? [y/n]", the plainest form a permission question takes; asked in place of the
    # input box (with "> " still below it, it is text on the screen, not a question being asked).
    permission=re.compile(r"(?P<tool>\w+)?[^\n`]*`(?P<what>[^`\n]+)`\?\s*\[y/n\]"),
    input_line=re.compile(r"^\s*>(?:\s|$)"),
)

# Claude Code 2.1.330's interactive UI, as measured (config pre-seeded, no -p; protocols/claude-code.md
# §2): a "❯" input line between rules, "● " before each message, a "✻ <verb> for 3s" line after a
# turn, and permission questions as a numbered menu under "Do you want to proceed?" with the command
# between dashed rules.  Any of its "No" answers interrupts the turn, as Esc does.  The question is
# drawn below a full-width rule in place of the input box: " ❯ 1. Yes", the other options, and
# "Esc to cancel · Tab to amend" last (measured on 2.1.330); the model's own text is above the rule.
CLAUDE_TUI = TuiRules(
    name="claude-code",
    ready=re.compile(r"^\s*❯|for shortcuts|shift\+tab to cycle", re.MULTILINE),
    chrome=(
        re.compile(r"^[\s─━═│┃╭╮╰╯┌┐└┘▐▛▜▝▘█▌╌]*$"),
        re.compile(r"^\s*[│>❯]\s*[>❯]?\s*$"),
        re.compile(
            r"for shortcuts|esc to interrupt|ctrl\+|Tip:|⏵⏵|⏸|bypass permissions|accept edits"
            r"|shift\+tab|· /effort",
            re.I,
        ),
        re.compile(r"^\s*[│╭╰▎▐▝]"),
        re.compile(r"^\s*[✢✳✶✻✽·]\s+\S+(?:…| for \d)"),  # the spinner, and the turn's timing line
    ),
    permission=re.compile(
        r"(?:(?P<tool>\w+) command\n(?:[^\n]*\n)*?\s*╌+\n\s*(?P<what>[^\n]+)\n\s*╌+\n(?:[^\n]*\n)*?)?"
        r"\s*Do you want to (?:proceed|make this edit[^\n?]*|create[^\n?]*)\?"
    ),
    approve_keys="1",
    deny_keys="\x1b",
    interrupt_keys="\x1b",
    exit_keys="\x04\x04",
    busy=re.compile(r"esc to interrupt", re.I),
    prompt_prefix=("❯ ", "> "),
    bullet=re.compile(r"^\s*[●⏺]\s"),
    dialog=re.compile(r"^─{20,}$", re.MULTILINE),
    menu=re.compile(r"^\s*(?:❯\s*)?\d+\.\s|^ {4,}\S|^\s*Esc to cancel"),
    menu_cursor=re.compile(r"^\s*❯\s*\d+\.\s"),
    input_line=re.compile(r"^\s*[>❯](?:\s*$|\s+(?!\d+\.))"),
)


class TerminalExecutor(Executor):
    """Any agent with a text UI, by its command (``--command``)."""

    name = "terminal"
    protocol = "terminal"
    transport = "pty"
    driver = "terminal"
    program = ""
    install_hint = "Any agent with a text UI: give its command with --command (e.g. 'aider')."
    rules: ClassVar[TuiRules] = GENERIC_TUI
    stable_seconds: ClassVar[float] = 1.0
    capabilities: ClassVar[Capabilities] = Capabilities(
        protocol="terminal",
        session_resume=False,
        approvals=True,
        mcp=False,
        mid_execution_messages=True,
        interrupt=True,
        requires_setup=False,
    )

    @property
    def still_for(self) -> float:
        """Seconds of a still screen that end a turn: the option, else this agent's default."""
        return self.options.stable_seconds or self.stable_seconds

    def build_argv(self, task: Task) -> list[str]:
        return [*self.base_command(), *self.options.extra_args]

    def create_normalizer(self) -> TerminalScreenNormalizer:
        return TerminalScreenNormalizer(self.rules, self.terminal_size)


class ClaudeCodeTuiExecutor(TerminalExecutor):
    """Claude Code's interactive UI (not its stream-json): for what only the UI does."""

    name = "claude-code-tui"
    program = "claude"
    npm_package = "@anthropic-ai/claude-code"
    install_hint = "Install it with: npm install @anthropic-ai/claude-code"
    rules = CLAUDE_TUI
    stable_seconds = 1.5

    def build_argv(self, task: Task) -> list[str]:
        argv = [*self.base_command()]
        model = task.model or self.options.model
        if model:
            argv += ["--model", model]
        # Its own default is auto mode, which asks nobody: ask, so the approval service decides.
        argv += ["--permission-mode", self.options.permission_mode or "default"]
        return argv + list(self.options.extra_args)
