"""Claude Code's control channel over stream-json, sans-I/O.

The client writes ``control_request`` lines (initialize, interrupt, set_permission_mode) and
``control_response`` answers; the CLI writes its own ``control_request`` lines (``can_use_tool``,
``hook_callback`` ...) and ``control_cancel_request`` when it gives up on one.  This class turns
lines into events and decisions into lines; the run does the I/O.

Matching is by request id only: with ``--replay-user-messages`` the CLI echoes the client's own
``control_response`` lines back on stdout, so a response is ours only if we sent its request.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..wire.lines import WireLine, parse_line

__all__ = [
    "CanUseTool",
    "ClaudeControlPeer",
    "ControlAnswered",
    "ControlCancelled",
    "PeerEvent",
    "SessionState",
    "TurnEnded",
    "UnsupportedRequest",
]


@dataclass(frozen=True)
class CanUseTool:
    request_id: str
    tool_name: str
    input: dict[str, Any]
    tool_use_id: str | None
    description: str | None
    blocked_path: str | None


@dataclass(frozen=True)
class ControlCancelled:
    """The CLI withdrew a request (an interrupt while an approval was pending)."""

    request_id: str


@dataclass(frozen=True)
class ControlAnswered:
    """The CLI answered a request of ours."""

    request_id: str
    success: bool
    response: dict[str, Any]
    error: str | None


@dataclass(frozen=True)
class UnsupportedRequest:
    """A request we do not serve; ``reply`` is the error answer to write, so it never hangs."""

    request_id: str
    subtype: str
    reply: bytes


@dataclass(frozen=True)
class TurnEnded:
    """A ``result`` line: one user turn is over."""

    is_error: bool
    subtype: str


@dataclass(frozen=True)
class SessionState:
    """``system/session_state_changed``: running, requires_action or idle (nothing queued)."""

    state: str


PeerEvent = CanUseTool | ControlCancelled | ControlAnswered | UnsupportedRequest | TurnEnded | SessionState


@dataclass
class ClaudeControlPeer:
    _counter: int = 0
    _sent: set[str] = field(default_factory=set)
    pending_approvals: set[str] = field(default_factory=set)

    # --- what the client writes ---------------------------------------------------------------

    @staticmethod
    def user_message(text: str) -> bytes:
        return _line(
            {
                "type": "user",
                "session_id": "",
                "parent_tool_use_id": None,
                "message": {"role": "user", "content": text},
            }
        )

    def request(self, subtype: str, **fields: Any) -> tuple[str, bytes]:
        """A new control request: its id (``req_<n>_<hex>``, as the SDK does) and its line."""
        self._counter += 1
        request_id = f"req_{self._counter}_{secrets.token_hex(4)}"
        self._sent.add(request_id)
        return request_id, _line(
            {"type": "control_request", "request_id": request_id, "request": {"subtype": subtype, **fields}}
        )

    def allow(self, request_id: str, updated_input: dict[str, Any]) -> bytes:
        # Always send updatedInput: the SDK does, and the CLI runs the tool with exactly this input.
        return self._answer(request_id, {"behavior": "allow", "updatedInput": updated_input})

    def deny(self, request_id: str, message: str, interrupt: bool = False) -> bytes:
        body: dict[str, Any] = {"behavior": "deny", "message": message}
        if interrupt:
            body["interrupt"] = True
        return self._answer(request_id, body)

    def error(self, request_id: str, message: str) -> bytes:
        self.pending_approvals.discard(request_id)
        return _line(
            {
                "type": "control_response",
                "response": {"subtype": "error", "request_id": request_id, "error": message},
            }
        )

    def _answer(self, request_id: str, body: dict[str, Any]) -> bytes:
        self.pending_approvals.discard(request_id)
        return _line(
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": request_id, "response": body},
            }
        )

    # --- what the CLI writes ------------------------------------------------------------------

    def receive_line(self, line: str) -> list[PeerEvent]:
        """One line as text (tests, tools): parsed here; the live run hands :meth:`receive` the
        line its wire parsed already."""
        return self.receive(parse_line(line))

    def receive(self, line: WireLine) -> list[PeerEvent]:
        """The events in one stdout line, parsed once by the wire (read here, never parsed again)."""
        obj = line.value
        if type(obj) is not dict:
            return []
        match obj.get("type"):
            case "control_request":
                return self._incoming_request(obj)
            case "control_cancel_request":
                request_id = str(obj.get("request_id"))
                self.pending_approvals.discard(request_id)
                return [ControlCancelled(request_id)]
            case "control_response":
                return self._incoming_response(_dict(obj.get("response")))
            case "result":
                return [TurnEnded(bool(obj.get("is_error")), str(obj.get("subtype")))]
            case "system" if obj.get("subtype") == "session_state_changed":
                return [SessionState(str(obj.get("state")))]
        return []

    def _incoming_request(self, obj: dict[str, Any]) -> list[PeerEvent]:
        request_id = str(obj.get("request_id"))
        req = _dict(obj.get("request"))
        subtype = str(req.get("subtype"))
        if subtype == "can_use_tool":
            self.pending_approvals.add(request_id)
            return [
                CanUseTool(
                    request_id,
                    str(req.get("tool_name")),
                    _dict(req.get("input")),
                    _str(req.get("tool_use_id")),
                    _str(req.get("description")),
                    _str(req.get("blocked_path")),
                )
            ]
        return [
            UnsupportedRequest(
                request_id,
                subtype,
                self.error(request_id, f"orchestrate does not serve {subtype!r} requests"),
            )
        ]

    def _incoming_response(self, resp: dict[str, Any]) -> list[PeerEvent]:
        request_id = str(resp.get("request_id"))
        if request_id not in self._sent:
            return []  # an echo of our own answer, or not ours at all
        self._sent.discard(request_id)
        body = _dict(resp.get("response"))
        ok = resp.get("subtype") == "success"
        return [ControlAnswered(request_id, ok, body, None if ok else str(resp.get("error")))]


def _dict(value: Any) -> dict[str, Any]:
    """A field the CLI should send as an object; anything else reads as an empty one."""
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    """An optional string field; a value of another type reads as absent."""
    return value if isinstance(value, str) else None


def _line(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj) + b"\n"
