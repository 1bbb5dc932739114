"""Approvals: one service every executor asks through, failing closed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
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

# Each name is imported from its module when first asked for (PEP 562): importing one module of
# this package (``approvals.base`` for a type) must not load the terminal prompt, the policy or
# the shell parser, which a run needs only once the agent asks for something.
_WHERE = {
    **dict.fromkeys(
        (
            "ApprovalDecision",
            "ApprovalRequest",
            "ApprovalService",
            "changed_input_refusal",
            "decide",
            "write_refusal",
        ),
        ".base",
    ),
    **dict.fromkeys(("ApprovalPipeline", "SessionMemory"), ".pipeline"),
    **dict.fromkeys(("RulePolicy", "Rules"), ".policy"),
    "TerminalPrompt": ".prompt",
    "always_scopes": ".scopes",
    **dict.fromkeys(("AutoApprove", "AutoDeny"), ".simple"),
    **dict.fromkeys(("READ_ONLY_TOOLS", "is_read_only_tool"), ".tools"),
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals(), __all__)
