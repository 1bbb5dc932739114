"""The JSON contract a TypeScript board reads: the seed's ``agent-executor.d.ts`` interfaces, grown.

The entries are :mod:`orchestrate.entries`; this module adds the rest of the seed's data shapes in
their JSON form: ``AgentCapabilities`` (with ``ProtocolType``), ``ApprovalRequest`` and
``ApprovalDecision`` (``approved`` / ``denied`` / ``timeout``, as the seed spells them, where the
Python pipeline says ``timed_out``).  ``orchestrate schema --contract`` prints the JSON Schema of all
of it; ``contract/orchestrate.d.ts`` is generated from the same models (:mod:`.typescript`), and CI
type-checks it against the seed with ``tsc``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Protocol

from pydantic import Field, TypeAdapter
from pydantic.json_schema import models_json_schema

from ..entries import EntryPatch, Model, NormalizedEntry

__all__ = [
    "SEED_PROTOCOLS",
    "AgentCapabilities",
    "ApprovalDecisionJson",
    "ApprovalRequestJson",
    "ApprovedDecision",
    "DeniedDecision",
    "ProtocolType",
    "TimeoutDecision",
    "contract_json_schema",
    "decision_from_json",
    "decision_to_json",
    "seed_protocol",
]

ProtocolType = Literal["acp", "jsonrpc", "stream-json", "jsonl", "custom"]
SEED_PROTOCOLS: frozenset[str] = frozenset({"acp", "jsonrpc", "stream-json", "jsonl", "custom"})


def seed_protocol(protocol: str) -> ProtocolType:
    """An executor's wire protocol as the seed's ``ProtocolType`` names it: ``custom`` for one of ours
    the seed does not know (a terminal screen)."""
    return protocol if protocol in SEED_PROTOCOLS else "custom"  # type: ignore[return-value]


class AgentCapabilities(Model):
    """What an agent supports, declared up front (the seed's ``AgentCapabilities``, grown)."""

    supports_session_resume: bool
    requires_setup: bool
    supports_approvals: bool
    supports_mcp: bool
    protocol: ProtocolType
    supports_mid_execution_messages: bool
    supports_fork: bool = False
    supports_interrupt: bool = False
    wire_protocol: str | None = None
    """The protocol's own name when ``protocol`` is ``custom``."""


class ApprovalRequestJson(Model):
    """A tool call waiting for permission (the seed's ``ApprovalRequest``, grown)."""

    request_id: str
    tool_name: str
    tool_input: Any
    context: str | None = None
    tool_call_id: str | None = None
    command: str | None = None
    paths: tuple[str, ...] = ()
    read_only: bool = False
    executor: str | None = None
    session_id: str | None = None
    cwd: str | None = None


class ApprovedDecision(Model):
    status: Literal["approved"] = "approved"
    updated_input: Any = None
    for_session: bool = False
    scope: Literal["call", "mcp_server"] = "call"


class DeniedDecision(Model):
    status: Literal["denied"] = "denied"
    reason: str | None = None
    interrupt: bool = False


class TimeoutDecision(Model):
    """Nobody answered in time: never an approval, and the turn is interrupted."""

    status: Literal["timeout"] = "timeout"
    reason: str | None = None


ApprovalDecisionJson = Annotated[
    ApprovedDecision | DeniedDecision | TimeoutDecision, Field(discriminator="status")
]
_DECISION: TypeAdapter[ApprovedDecision | DeniedDecision | TimeoutDecision] = TypeAdapter(
    ApprovalDecisionJson
)


class _Decision(Protocol):
    """The approval pipeline's ``ApprovalDecision`` (read by attribute: this layer sits below it)."""

    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def updated_input(self) -> Any: ...
    @property
    def for_session(self) -> bool: ...
    @property
    def interrupt(self) -> bool: ...
    @property
    def scope(self) -> str: ...


def decision_to_json(decision: _Decision) -> dict[str, Any]:
    """The pipeline's decision in the seed's JSON form (``timed_out`` becomes ``timeout``)."""
    model: ApprovedDecision | DeniedDecision | TimeoutDecision
    if decision.status == "approved":
        model = ApprovedDecision(
            updated_input=decision.updated_input,
            for_session=decision.for_session,
            scope=decision.scope,  # type: ignore[arg-type]
        )
    elif decision.status == "denied":
        model = DeniedDecision(reason=decision.reason, interrupt=decision.interrupt)
    else:
        model = TimeoutDecision(reason=decision.reason)
    return model.to_json_dict()


def decision_from_json(data: Any) -> dict[str, Any]:
    """A decision in the seed's JSON form, checked, as the keyword arguments of the pipeline's
    ``ApprovalDecision`` (``timeout`` becomes ``timed_out``, which always interrupts)."""
    model = _DECISION.validate_python(data)
    if isinstance(model, ApprovedDecision):
        return {
            "status": "approved",
            "updated_input": model.updated_input,
            "for_session": model.for_session,
            "scope": model.scope,
        }
    if isinstance(model, DeniedDecision):
        return {"status": "denied", "reason": model.reason, "interrupt": model.interrupt}
    return {"status": "timed_out", "reason": model.reason, "interrupt": True}


def contract_json_schema() -> dict[str, Any]:
    """The JSON Schema of every shape of the contract (camelCase, as serialized), in ``$defs``."""
    _, schema = models_json_schema(
        [
            (EntryPatch, "serialization"),
            (NormalizedEntry, "serialization"),
            (AgentCapabilities, "serialization"),
            (ApprovalRequestJson, "serialization"),
            (ApprovedDecision, "serialization"),
            (DeniedDecision, "serialization"),
            (TimeoutDecision, "serialization"),
        ],
        by_alias=True,
        title="orchestrate JSON contract",
    )
    return schema
