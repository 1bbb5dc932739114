"""Services with a fixed answer, and the per-session memory of "allow for the rest of this session"."""

from __future__ import annotations

from .base import ApprovalDecision, ApprovalRequest, ApprovalService, write_refusal

__all__ = ["AutoApprove", "AutoDeny", "SessionMemory"]


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


class SessionMemory:
    """Wraps a service: once a tool is approved ``for_session``, later calls of it pass unasked."""

    def __init__(self, inner: ApprovalService) -> None:
        self.inner = inner
        self._allowed: set[str] = set()

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        if request.tool_name in self._allowed:
            return ApprovalDecision.approve(for_session=True)
        decision = await self.inner.request_approval(request)
        if decision.status == "approved" and decision.for_session:
            self._allowed.add(request.tool_name)
        return decision

    def refuse_write(self, path: str, cwd: str | None) -> str | None:
        return write_refusal(self.inner, path, cwd)
