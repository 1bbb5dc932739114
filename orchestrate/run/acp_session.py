"""The session half of the ACP client (ACP 1.x): which call reopens a session, how the model is
chosen, and how a session ends.  Pure decisions on the agent's own answers, no I/O."""

from __future__ import annotations

from typing import Any

__all__ = ["model_request", "offers", "reopen_method"]


def offers(capabilities: dict[str, Any], name: str) -> bool:
    """Whether the agent's ``initialize`` answer offers session capability ``name`` (``list``,
    ``resume``, ``close``, ``fork``): present as an object under ``sessionCapabilities``."""
    sessions = capabilities.get("sessionCapabilities")
    return isinstance(sessions, dict) and sessions.get(name) is not None


def reopen_method(capabilities: dict[str, Any]) -> str:
    """How to continue an earlier session: ``session/resume`` when offered (the agent restores it
    without replaying the history to us), else ``session/load`` (which replays it as updates).
    An agent that offers neither is asked to resume anyway: its error says so, and the run falls
    back to a fresh session where the task allows."""
    if offers(capabilities, "resume"):
        return "session/resume"
    if capabilities.get("loadSession"):
        return "session/load"
    return "session/resume"


def model_request(session: dict[str, Any], session_id: str, model: str) -> tuple[str, dict[str, Any]] | None:
    """The request that picks ``model`` for a session the agent opened with answer ``session``:
    the session's ``model`` config option (ACP 1.x), else the older ``session/set_model`` where the
    agent lists models, else None (the agent offers no way)."""
    for option in session.get("configOptions") or []:
        if isinstance(option, dict) and (option.get("id") == "model" or option.get("category") == "model"):
            params = {"sessionId": session_id, "configId": str(option.get("id")), "value": model}
            return "session/set_config_option", params
    if isinstance(session.get("models"), dict):
        return "session/set_model", {"sessionId": session_id, "modelId": model}
    return None
