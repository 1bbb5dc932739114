"""The approval contract every executor asks through, and the fail-closed way to ask."""

from __future__ import annotations

import math
from typing import Any, Literal, Protocol, runtime_checkable

import anyio
from pydantic import BaseModel, ConfigDict

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "ApprovalService",
    "changed_input_refusal",
    "decide",
    "write_refusal",
]


class ApprovalRequest(BaseModel):
    """A tool call waiting for permission.  ``command`` and ``paths`` are filled by the executor where
    it can tell, so policies need not know each agent's tool schemas."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    request_id: str
    tool_name: str
    tool_input: Any = None
    tool_call_id: str | None = None
    context: str | None = None
    command: str | None = None
    paths: tuple[str, ...] = ()
    read_only: bool = False
    executor: str | None = None
    session_id: str | None = None
    cwd: str | None = None
    editable: bool = False
    """The agent runs the tool with the input an approval gives back (``updated_input``; Claude's
    ``updatedInput``), so a person may approve a changed version; where False it would be ignored."""


class ApprovalDecision(BaseModel):
    """approved (maybe with changed input, maybe for the rest of the session), denied (with a reason,
    maybe interrupting the turn), or timed_out (which always interrupts).

    An approval ``for_session`` covers what the person saw, never the whole tool: ``scope="call"``
    is this tool with the command's programs and subcommands (``git log``), or the path's
    directory; ``scope="mcp_server"`` is every tool of the call's MCP server.  The pipeline fills
    ``remembered`` with the scopes it stored, in words."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    status: Literal["approved", "denied", "timed_out"]
    reason: str | None = None
    updated_input: Any = None
    for_session: bool = False
    interrupt: bool = False
    scope: Literal["call", "mcp_server"] = "call"
    remembered: tuple[str, ...] = ()

    @classmethod
    def approve(
        cls,
        updated_input: Any = None,
        *,
        for_session: bool = False,
        scope: Literal["call", "mcp_server"] = "call",
    ) -> ApprovalDecision:
        return cls(status="approved", updated_input=updated_input, for_session=for_session, scope=scope)

    @classmethod
    def deny(cls, reason: str, *, interrupt: bool = False) -> ApprovalDecision:
        return cls(status="denied", reason=reason, interrupt=interrupt)

    @classmethod
    def timed_out(cls, seconds: float) -> ApprovalDecision:
        return cls(status="timed_out", reason=f"no approval decision within {seconds:g} s", interrupt=True)


@runtime_checkable
class ApprovalService(Protocol):
    """Decides whether a tool call may run.  May take as long as a person needs; the caller bounds it."""

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision: ...


async def decide(
    service: ApprovalService, request: ApprovalRequest, seconds: float | None
) -> ApprovalDecision:
    """Ask ``service``, failing closed: an exception is a denial, and no answer within ``seconds``
    is ``timed_out`` (which interrupts the turn).  Never returns an approval by accident."""
    limit = math.inf if seconds is None else seconds
    try:
        with anyio.fail_after(limit):
            decision = await service.request_approval(request)
    except TimeoutError:
        return ApprovalDecision.timed_out(limit)
    except Exception as exc:  # fail closed: a broken service must never let a tool run
        return ApprovalDecision.deny(f"approval service failed: {type(exc).__name__}: {exc}")
    if not isinstance(decision, ApprovalDecision):
        return ApprovalDecision.deny(f"approval service returned {type(decision).__name__}, not a decision")
    return decision


def write_refusal(service: ApprovalService, path: str, cwd: str | None) -> str | None:
    """Why a file write the agent asks the client to do is refused, or None.  A service may define
    ``refuse_write(path, cwd) -> str | None`` (the rule policy checks its path rules; deny-all refuses);
    one that does not lets the write through: it follows a permission the agent already asked."""
    return _refusal(service, "refuse_write", "write", path, cwd)


def read_refusal(service: ApprovalService, path: str, cwd: str | None) -> str | None:
    """Why a file read the agent asks the client to do is refused, or None: a service may define
    ``refuse_read(path, cwd) -> str | None`` (the rule policy checks its deny path rules)."""
    return _refusal(service, "refuse_read", "read", path, cwd)


def _refusal(service: ApprovalService, method: str, what: str, path: str, cwd: str | None) -> str | None:
    check = getattr(service, method, None)
    if check is None:
        return None
    try:
        reason = check(path, cwd)
    except Exception as exc:  # fail closed, as decide() does
        return f"approval service failed: {type(exc).__name__}: {exc}"
    return reason if isinstance(reason, str) or reason is None else f"approval service refused the {what}"


def changed_input_refusal(service: ApprovalService, request: ApprovalRequest) -> str | None:
    """Why an input a person changed before approving it (``request`` describes the changed one) is
    refused all the same, or None.  Hard deny rules hold whoever answers: a service may define
    ``refuse_changed(request) -> str | None`` (the pipeline checks its deny rules) and one that does
    not lets it through, as the person approved exactly this."""
    check = getattr(service, "refuse_changed", None)
    if check is None:
        return None
    try:
        reason = check(request)
    except Exception as exc:  # fail closed, as decide() does
        return f"approval service failed: {type(exc).__name__}: {exc}"
    return reason if isinstance(reason, str) or reason is None else "approval service refused the change"
