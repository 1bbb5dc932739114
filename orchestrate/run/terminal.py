"""Driving an agent's text UI through a pseudo-terminal: wait until it is ready, type the prompt as a
bracketed paste, call the turn done when the screen has been still for a while (as coder/agentapi
does), and answer its permission questions through the approval service by pressing keys."""

from __future__ import annotations

import contextlib
import re
import secrets
import unicodedata
from typing import Any

import anyio
import pyte

from ..approvals.base import ApprovalRequest, decide
from ..errors import ProcessExitedError
from ..executors.terminal import TerminalExecutor
from ..wire.lines import WireLine
from ..wire.notes import Interrupt, PermissionPrompt, Screen, UserInput
from .driver import Driver, DriverContext

__all__ = ["TerminalDriver", "pasteable"]

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
_READY_TIMEOUT = 60.0


def pasteable(text: str) -> str:
    """``text`` as it may be pasted: line ends as ``\\n``, and no other control character (C0, DEL
    or C1), so a prompt can neither end the bracketed paste early (``\\x1b[201~``) nor press keys
    (Enter, Esc, Ctrl-C, Ctrl-D) in the agent's UI.  Tabs stay."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(c for c in text if c in "\n\t" or unicodedata.category(c) != "Cc")


class TerminalDriver(Driver[TerminalExecutor]):
    def __init__(self, ctx: DriverContext[TerminalExecutor]) -> None:
        super().__init__(ctx)
        self.executor = ctx.executor
        self.rules = ctx.executor.rules
        rows, cols = ctx.executor.terminal_size
        self.screen = pyte.Screen(cols, rows)
        self._stream = pyte.ByteStream(self.screen)
        self._changed = anyio.Event()
        self._last_output = anyio.current_time()
        self._asking = False
        self._shown: str | None = None
        self._turn = False
        self._sent_at = 0.0

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    async def on_output(self, data: bytes) -> None:
        self._stream.feed(data)
        self._last_output = anyio.current_time()
        self._changed.set()
        self._changed = anyio.Event()
        if self._turn and not self._asking and not self.input_closed:
            self._check_permission()

    reads_lines = False  # a screen is not lines: on_output has it all

    async def on_line(self, line: WireLine) -> None:
        pass

    async def start(self, prompt: str) -> None:
        with anyio.move_on_after(_READY_TIMEOUT):
            while not self.rules.ready.search(self.text()):
                await self._changed.wait()
        await self._settle()
        await self.send_message(prompt)
        self.ctx.task_group.start_soon(self._watch)

    async def send_message(self, text: str) -> None:
        text = pasteable(text)
        self.ctx.note(UserInput(text))
        self._sent_at = float("inf")  # until it is sent, nothing on the screen answers it
        self._turn = True
        self.set_idle(False)
        await self.ctx.process.write((PASTE_START + text + PASTE_END).encode())
        await anyio.sleep(0.1)  # let the UI take the paste before the key that sends it
        await self.ctx.process.write(self.rules.submit_keys.encode())
        self._sent_at = anyio.current_time()

    async def interrupt(self) -> None:
        self.ctx.note(Interrupt())
        await self.ctx.process.write(self.rules.interrupt_keys.encode())

    async def end_input(self) -> None:
        self.input_closed = True
        with contextlib.suppress(ProcessExitedError):  # gone already: what end_input asks is done
            await self.ctx.process.write(self.rules.exit_keys.encode())

    # --- the screen settling ------------------------------------------------------------------

    async def _settle(self, at_most: float = float("inf")) -> bool:
        """Wait until the screen has not changed for the executor's stable time (True), or at most
        ``at_most`` seconds (False: it is still moving)."""
        start = anyio.current_time()
        # Stillness is the absence of events: it can only be seen by looking again after a while.
        while anyio.current_time() - self._last_output < self.executor.still_for:
            if anyio.current_time() - start >= at_most:
                return False
            await anyio.sleep(self.executor.still_for / 4)
        return True

    async def _watch(self) -> None:
        while True:
            await self._changed.wait()
            still = False
            while not still:
                # A screen that keeps moving (a streamed answer) is still shown every so often.
                still = await self._settle(at_most=self.executor.still_for * 2)
                if self._asking:
                    continue
                busy = self.rules.busy is not None and self.rules.busy.search(self.text())
                # A screen still since before the message was typed (or the key answering a
                # question pressed) has not answered it yet.
                answered = self._last_output > self._sent_at
                done = still and self._turn and answered and not busy
                self.ctx.note(Screen(still, done))
                if done:
                    self._turn = False
                    self.set_idle(True)

    # --- permission questions -----------------------------------------------------------------

    def _check_permission(self) -> None:
        match = self.rules.question(self.text())
        if match is None:
            self._shown = None  # gone: the same question asked again later is a new question
            return
        if match.group(0) == self._shown:
            return  # answered already, the UI has not redrawn yet
        self._asking = True
        self._shown = match.group(0)
        self.ctx.task_group.start_soon(self._ask, match)

    async def _ask(self, match: re.Match[str]) -> None:
        try:
            # Let the whole question draw; not until all is still, as a mark may blink beside it.
            await self._settle(at_most=self.executor.still_for * 2)
            request_id = "screen-" + secrets.token_hex(4)
            what = match.groupdict().get("what") or ""
            request = ApprovalRequest(
                request_id=request_id,
                tool_name=match.groupdict().get("tool") or "tool",
                tool_input={"screen": match.group(0)},
                context=match.group(0),
                command=what or None,
                executor=self.executor.name,
                cwd=str(self.ctx.task.cwd),
            )
            self.ctx.note(PermissionPrompt(request_id, what, request.tool_name, match.group(0)))
            decision = await decide(self.ctx.approvals, request, self.ctx.task.approval_timeout)
            self.note_decision(request_id, decision)
            keys = self.rules.approve_keys if decision.status == "approved" else self.rules.deny_keys
            if self.input_closed:
                return  # the run is ending: the agent is being told to exit, not answered
            try:
                await self.ctx.process.write(keys.encode())
            except ProcessExitedError:
                return  # it exited while the question was out: there is nobody left to answer
            # The key is input, as the prompt was: the screen still since before it (the question)
            # has not answered it, and must not end the turn before the UI has shown what the key
            # did.  It did when the watch looked between the key and the UI's redraw: whenever the
            # approval held the loop past the watch's next look (a first import, a collector's pass).
            self._sent_at = anyio.current_time()
            if decision.status != "approved" and decision.interrupt:
                await self.interrupt()
        finally:
            self._asking = False

    def describe(self) -> dict[str, Any]:
        return {
            "rules": self.rules.name,
            "size": self.executor.terminal_size,
            "still_for": self.executor.still_for,
        }
