"""Approvals: one service every executor asks through, failing closed."""

from __future__ import annotations

from .base import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalService,
    changed_input_refusal,
    decide,
    write_refusal,
)
from .pipeline import ApprovalPipeline, SessionMemory
from .policy import RulePolicy, Rules
from .prompt import TerminalPrompt
from .scopes import always_scopes
from .simple import AutoApprove, AutoDeny
from .tools import READ_ONLY_TOOLS, is_read_only_tool

__all__ = [
    "READ_ONLY_TOOLS",
    "ApprovalDecision",
    "ApprovalPipeline",
    "ApprovalRequest",
    "ApprovalService",
    "AutoApprove",
    "AutoDeny",
    "RulePolicy",
    "Rules",
    "SessionMemory",
    "TerminalPrompt",
    "always_scopes",
    "changed_input_refusal",
    "decide",
    "is_read_only_tool",
    "write_refusal",
]
