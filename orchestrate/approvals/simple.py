"""Services with a fixed answer."""

from __future__ import annotations

from .base import ApprovalDecision, ApprovalRequest

__all__ = ["AutoApprove", "AutoDeny"]


class AutoApprove:
    """Approves everything (CI, sandboxes)."""

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision.approve()


class AutoDeny:
    """Denies everything, with a reason the agent sees."""

    def __init__(self, reason: str = "denied by policy: this run approves no tools") -> None:
        self.reason = reason

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision.deny(self.reason)

    def refuse_write(self, path: str, cwd: str | None) -> str | None:
        return self.reason
