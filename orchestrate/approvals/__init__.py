"""Approvals: one service every executor asks through, failing closed."""

from __future__ import annotations

from .base import ApprovalDecision, ApprovalRequest, ApprovalService, decide, write_refusal
from .policy import RulePolicy, Rules
from .prompt import TerminalPrompt
from .simple import AutoApprove, AutoDeny, SessionMemory

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "ApprovalService",
    "AutoApprove",
    "AutoDeny",
    "RulePolicy",
    "Rules",
    "SessionMemory",
    "TerminalPrompt",
    "decide",
    "write_refusal",
]
