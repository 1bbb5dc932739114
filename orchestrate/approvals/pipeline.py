"""The approval pipeline: one fixed order for every executor.

1. Hard deny rules, always first: nothing answered earlier can approve what they forbid.
2. The session's "always" memory, scoped to what the person saw (:mod:`.scopes`).
3. The policy: autonomy and allow rules.
4. The person, or the fallback.

A run installs it around whatever service its caller passed (``Run(approvals=...)``), so a
``TerminalPrompt`` or ``AutoApprove`` gets deny-first semantics as soon as a policy with deny
rules is given.  A call the deny rules might forbid but cannot be sure of (a program only known
at run time, an unreadable line) skips steps 2 and 3: only a person may approve it, and an
approve-everything service is no person."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TypeGuard

from .base import ApprovalDecision, ApprovalRequest, ApprovalService, read_refusal, write_refusal
from .simple import AutoApprove

if TYPE_CHECKING:  # the rules load with a policy file, not with every run (see _is_rule_policy)
    from .policy import RulePolicy
    from .scopes import SessionScopes

# The facts of a call (its parsed command, its resolved paths) and the session's memory are
# imported with the first request, not with the run: every run makes a pipeline before it starts
# its agent, and most reach their first entry before the agent asks anything (~9 ms of CPU:
# the command and path parsers, their dataclasses; tests/test_first_entry_imports.py).

__all__ = ["ApprovalPipeline", "SessionMemory"]


class ApprovalPipeline:
    """Wraps ``service`` (the person, a fixed answer, or a :class:`RulePolicy` whose fallback is
    the person).  ``policy`` adds deny and allow rules to a service that has none."""

    def __init__(self, service: ApprovalService, policy: RulePolicy | None = None) -> None:
        self.service = service
        self.policy = policy if policy is not None else service if _is_rule_policy(service) else None
        self._scopes: SessionScopes | None = None

    @classmethod
    def around(cls, service: ApprovalService) -> ApprovalPipeline:
        """``service`` in a pipeline (itself, if it is one already)."""
        return service if isinstance(service, ApprovalPipeline) else cls(service)

    @property
    def scopes(self) -> SessionScopes:
        """The session's "always" memory, made with the first call that needs it."""
        if self._scopes is None:
            from .scopes import SessionScopes

            self._scopes = SessionScopes()
        return self._scopes

    @property
    def inner(self) -> ApprovalService:
        """The service the pipeline wraps (the name SessionMemory used)."""
        return self.service

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        from .facts import Facts

        facts = Facts.of(request)
        policy = self.policy
        uncertain = None
        if policy is not None:
            verdict = policy.hard_deny(facts)
            if verdict.denied is not None:
                return ApprovalDecision.deny(verdict.denied)
            uncertain = verdict.uncertain
        if uncertain is None:
            covered = self.scopes.covers(facts)
            if covered is not None:
                return ApprovalDecision(status="approved", for_session=True, remembered=covered)
            if policy is not None:
                decided = policy.by_rules(facts)
                if decided is not None:
                    return decided
        decision = await self._ask(request, uncertain)
        if decision.status == "approved" and decision.for_session:
            remembered = self.scopes.remember(facts, decision.scope)
            decision = decision.model_copy(update={"remembered": remembered})
        return decision

    async def _ask(self, request: ApprovalRequest, uncertain: str | None) -> ApprovalDecision:
        """Step 4: the person (the service, or the policy's fallback)."""
        if self.service is self.policy:
            assert self.policy is not None
            return await self.policy.ask_fallback(request, uncertain)
        if uncertain is not None and isinstance(self.service, AutoApprove):
            return ApprovalDecision.deny(uncertain)
        return await self.service.request_approval(request)

    def refuse_changed(self, request: ApprovalRequest) -> str | None:
        """Step 1 again for an input the person changed before approving it: a hard deny rule
        forbids the changed call as surely as the proposed one (see base.changed_input_refusal)."""
        if self.policy is None:
            return None
        from .facts import Facts

        return self.policy.hard_deny(Facts.of(request)).denied

    def refuse_read(self, path: str, cwd: str | None) -> str | None:
        if self.policy is not None and self.policy is not self.service:
            reason = read_refusal(self.policy, path, cwd)
            if reason is not None:
                return reason
        return read_refusal(self.service, path, cwd)

    def refuse_write(self, path: str, cwd: str | None) -> str | None:
        if self.policy is not None and self.policy is not self.service:
            reason = write_refusal(self.policy, path, cwd)
            if reason is not None:
                return reason
        return write_refusal(self.service, path, cwd)


def _is_rule_policy(service: ApprovalService) -> TypeGuard[RulePolicy]:
    """Whether ``service`` is a :class:`RulePolicy`; none exists until its module is loaded."""
    policy = sys.modules.get(f"{__package__}.policy")
    return policy is not None and isinstance(service, policy.RulePolicy)


SessionMemory = ApprovalPipeline
"""The name earlier versions gave the wrapper that remembered "always" answers."""
