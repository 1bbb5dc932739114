"""A text UI's screen -> user and assistant entries.

The bytes the terminal showed are replayed into a terminal emulator (pyte), so redraws, cursor moves
and colours land where they would on a screen.  What they mean needs the run's own notes, which the
raw log keeps: ``user_input`` (a prompt was typed: the screen as it was is the "before"),
``screen`` (a look at the screen, when it has been still for a while or at least every so often
while it moves: what appeared below the echoed prompt, or else since "before", without the agent's
chrome, is the answer so far; ``idle`` says the turn is over), ``permission_prompt`` and ``approval``
(a question on the screen, and how it was answered).  Like coder/agentapi's screen diffing.
"""

from __future__ import annotations

import difflib
from datetime import datetime

import pyte

from ..entries import (
    ApprovalInfo,
    ApprovalOutcome,
    CommandRun,
    EntryPatch,
    GenericTool,
    ToolStatus,
    ToolUse,
    ToolUseEntry,
)
from ..wire.notes import Approval, Interrupt, Note, PermissionPrompt, Screen, UserInput
from .base import Normalizer, Stream
from .compiled import mypyc_attr
from .kinds import ASSISTANT, USER
from .tui import TuiRules

__all__ = ["TerminalScreenNormalizer"]


@mypyc_attr(allow_interpreted_subclasses=True)
class TerminalScreenNormalizer(Normalizer):
    def __init__(self, rules: TuiRules, size: tuple[int, int]) -> None:
        super().__init__()
        self.rules = rules
        rows, cols = size
        self.screen = pyte.Screen(cols, rows)
        self._stream = pyte.ByteStream(self.screen)
        self._before: list[str] = []
        self._prompt_lines: set[str] = set()
        self._answer: int | None = None
        self._tools: dict[str, int] = {}
        self.log.track(self._tools)
        self._turn_open = False
        self._interrupted = False

    def lines(self) -> list[str]:
        """The screen now, one string per row, trailing blanks cut."""
        return [line.rstrip() for line in self.screen.display]

    def feed(self, chunk: bytes, stream: Stream = "stdout", ts: datetime | None = None) -> list[EntryPatch]:
        if stream == "stdout":
            self._stream.feed(chunk)
        return []  # keys typed (stdin) show on the screen, and the notes say what they meant

    def finish(self, ts: datetime | None = None) -> list[EntryPatch]:
        self.log.close_open_tools("cancelled")
        return self.log.drain()

    def on_note(self, event: Note, ts: datetime | None) -> None:
        match event:
            case UserInput():
                self._user_input(event.text, ts)
            case Screen():
                self._stable(ts, idle=event.idle)
            case PermissionPrompt():
                self._permission(event, ts)
            case Approval():
                self._approval(event)
            case Interrupt():
                self._interrupted = self._turn_open
            case _:
                super().on_note(event, ts)

    def _user_input(self, prompt: str, ts: datetime | None) -> None:
        self._before = self.lines()
        self._prompt_lines = {line.strip() for line in prompt.splitlines() if line.strip()}
        self._answer = None
        self._turn_open = True
        self.log.add(USER, prompt, ts)

    def _stable(self, ts: datetime | None, idle: bool) -> None:
        answer = self.answer_text()
        if self._answer is None and answer:
            self._answer = self.log.add(ASSISTANT, answer, ts)
        elif self._answer is not None and answer and answer != self.log.get(self._answer).content:
            self.log.replace(self._answer, content=answer)
        for index in self._tools.values():  # approved and the screen settled: it ran
            tool = self.log.tool(index)
            if tool is not None and tool.status == "running":
                self.log.update_tool(index, status="success")
        if idle and self._turn_open:  # the driver judged the turn over: nothing moves, nothing asked
            self._turn_open = False
            self.turn_statuses.append("interrupted" if self._interrupted else "completed")
            self._interrupted = False

    def answer_text(self) -> str:
        """The answer on the screen: the lines below the echoed prompt when the UI echoes it (a line
        repeated from an earlier answer still counts), else the lines that are new since the prompt
        was typed; chrome and the echo itself left out."""
        after = self.lines()
        echoes = [i for i, line in enumerate(after) if self._prompt_lines and self._is_echo(line)]
        if echoes:
            new = after[echoes[-1] + 1 :]
        else:
            matcher = difflib.SequenceMatcher(a=self._before, b=after, autojunk=False)
            new = [
                line
                for tag, _, _, j1, j2 in matcher.get_opcodes()
                if tag in ("insert", "replace")
                for line in after[j1:j2]
            ]
        kept = [line for line in new if not self.rules.is_chrome(line) and not self._is_echo(line)]
        while kept and not kept[0].strip():
            kept.pop(0)
        while kept and not kept[-1].strip():
            kept.pop()
        return "\n".join(self.rules.unmarked(line) for line in kept)

    def _is_echo(self, line: str) -> bool:
        bare = line.strip()
        for prefix in self.rules.prompt_prefix:
            bare = bare.removeprefix(prefix.strip()).strip()
        return bare in self._prompt_lines

    def _permission(self, event: PermissionPrompt, ts: datetime | None) -> None:
        request_id, what = event.request_id, event.what
        action = CommandRun(command=what) if what else GenericTool(tool_name="permission", args=event.text)
        tool = ToolUseEntry(
            tool_name=event.tool or "tool",
            action=action,
            status="pending_approval",
            approval=ApprovalInfo(request_id=request_id),
            tool_call_id=request_id,
        )
        self._tools[request_id] = self.log.add(ToolUse(tool=tool), f"`{what}`" if what else "permission", ts)

    def _approval(self, event: Approval) -> None:
        index = self._tools.get(event.request_id)
        if index is None:
            return
        decision = event.decision
        outcome: ApprovalOutcome = (
            "approved" if decision == "approved" else ("timed_out" if decision == "timed_out" else "denied")
        )
        status: ToolStatus = {"approved": "running", "timed_out": "timed_out"}.get(outcome, "denied")  # type: ignore[assignment]
        approval = ApprovalInfo(request_id=event.request_id, reason=event.reason, decision=outcome)
        self.log.update_tool(index, status=status, approval=approval)
