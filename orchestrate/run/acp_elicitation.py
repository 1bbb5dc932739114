"""``elicitation/create`` (ACP 1.x, unstable): the agent asks the person for input, a form of
primitive fields or a URL to visit.  The question goes through the approval service like a tool
call would: approved is ``accept``, refused ``decline``, no answer in time ``cancel``.  The values
of a form are the decision's ``updated_input`` (a person's answer), else the fields' defaults; a
form whose required fields have neither is declined, never answered with made-up values."""

from __future__ import annotations

from typing import Any

from ..approvals.base import ApprovalDecision, ApprovalRequest

__all__ = ["CANCEL", "answer", "request_for"]

CANCEL: dict[str, Any] = {"action": "cancel"}
DECLINE: dict[str, Any] = {"action": "decline"}


def request_for(request_id: str, params: Any, **context: Any) -> ApprovalRequest:
    """What the person is asked: the agent's message, and the form or the URL."""
    params = params if isinstance(params, dict) else {}
    shown = {k: params[k] for k in ("mode", "message", "requestedSchema", "url") if k in params}
    return ApprovalRequest(
        request_id=request_id,
        tool_name="elicitation",
        tool_input=shown,
        tool_call_id=params.get("toolCallId") if isinstance(params.get("toolCallId"), str) else None,
        context=str(params.get("message") or "The agent asks for input"),
        **context,
    )


def answer(params: Any, decision: ApprovalDecision) -> dict[str, Any]:
    """The elicitation's result for ``decision``."""
    params = params if isinstance(params, dict) else {}
    if decision.status == "timed_out":
        return CANCEL
    if decision.status != "approved":
        return DECLINE
    if params.get("mode") == "url":
        return {"action": "accept"}
    content = _form(params.get("requestedSchema"), decision.updated_input)
    return DECLINE if content is None else {"action": "accept", "content": content}


def _form(schema: Any, given: Any) -> dict[str, Any] | None:
    schema = schema if isinstance(schema, dict) else {}
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    content: dict[str, Any] = {
        name: spec["default"]
        for name, spec in properties.items()
        if isinstance(spec, dict) and _primitive(spec.get("default"))
    }
    if isinstance(given, dict):
        # Only the fields the form has, with values of the kinds a form can carry.
        fits = {k: v for k, v in given.items() if (not properties or k in properties) and _primitive(v)}
        content.update(fits)
    if any(name not in content for name in required):
        return None
    return content


def _primitive(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value)
    return isinstance(value, str | int | float | bool)
