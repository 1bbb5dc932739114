"""Ask a person at the terminal."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

import anyio

from .base import ApprovalDecision, ApprovalRequest

__all__ = ["TerminalPrompt"]

_HELP = "[y] yes  [a] yes, and for the rest of this session  [n] no  [i] no, and stop the turn"


class TerminalPrompt:
    """Prints the request and reads one answer per request.

    Reading happens in a worker thread so the run keeps streaming meanwhile; the thread is abandoned
    if the run stops waiting (a timeout), which then counts as ``timed_out``, never as yes.
    """

    def __init__(self, input: TextIO | None = None, output: TextIO | None = None) -> None:
        self._input = input
        self._output = output
        self._lock = anyio.Lock()  # one question on screen at a time

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        async with self._lock:
            return await anyio.to_thread.run_sync(self._ask, request, abandon_on_cancel=True)

    def _ask(self, request: ApprovalRequest) -> ApprovalDecision:
        out = self._output or sys.stderr
        inp = self._input or _tty() or sys.stdin
        out.write(f"\n? {request.tool_name} wants to run: {_summary(request)}\n  {_HELP}\n")
        while True:
            out.write("  > ")
            out.flush()
            line = inp.readline()
            if not line:
                return ApprovalDecision.deny("no answer: the terminal closed")
            answer = line.strip().lower()
            if answer in ("y", "yes"):
                return ApprovalDecision.approve()
            if answer in ("a", "always"):
                return ApprovalDecision.approve(for_session=True)
            if answer in ("n", "no", "i"):
                out.write("  reason (optional): ")
                out.flush()
                reason = inp.readline().strip() or "denied by the user"
                return ApprovalDecision.deny(reason, interrupt=answer == "i")
            out.write(f"  please answer one of: {_HELP}\n")


def _summary(request: ApprovalRequest) -> str:
    if request.command:
        return request.command
    if request.paths:
        return ", ".join(request.paths)
    return json.dumps(request.tool_input, ensure_ascii=False)[:500]


def _tty() -> TextIO | None:
    try:
        return Path("/dev/tty").open()
    except OSError:
        return None
