"""The terminal prompt of ``orchestrate run``, holding the live view still while it asks.

Apart from :mod:`.live` because every run makes one before it starts its agent, and the live view's
module loads rich, which a run needs only once the agent is starting (or not at all, for JSON lines).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..approvals.prompt import TerminalPrompt
from ..process.tty import given, in_foreground

if TYPE_CHECKING:
    from ..approvals.base import ApprovalDecision, ApprovalRequest
    from .live import LiveView

__all__ = ["ViewPrompt"]


class ViewPrompt(TerminalPrompt):
    """The terminal prompt, holding the live view still while its question is on the terminal."""

    def __init__(self) -> None:
        terminal = given()  # a warm server's run asks on the terminal of the command it serves
        super().__init__(terminal, terminal, in_foreground if terminal is not None else None)
        self.view: LiveView | None = None

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        if self.view is None:
            return await super().request_approval(request)
        with self.view.hold():
            return await super().request_approval(request)
