"""JSON-RPC 2.0 over lines, sans-I/O: one peer for Codex's app-server and for ACP agents.

Tolerant where real agents are loose: Codex omits ``"jsonrpc"`` on everything it sends and numbers
its own requests from 0 in a space separate from ours, so a message is told apart by its shape
(``method`` + ``id`` is a request to us, ``method`` alone a notification, ``id`` + ``result`` or
``error`` a response to us), never by the id's value alone.

An id must be a string or an integer: a request with any other id (a list, an object, a fraction,
a boolean, null) gets the spec's answer, -32600 Invalid Request with a null id, and is not served.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ..wire.lines import WireLine, parse_line

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "IncomingNotification",
    "IncomingRequest",
    "IncomingResponse",
    "InvalidRequest",
    "JsonRpcEvent",
    "JsonRpcPeer",
    "MalformedMessage",
]

INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RequestId = int | str


@dataclass(frozen=True)
class IncomingRequest:
    """The agent asks us something; it must get exactly one answer."""

    id: RequestId
    method: str
    params: Any


@dataclass(frozen=True)
class IncomingNotification:
    method: str
    params: Any


@dataclass(frozen=True)
class IncomingResponse:
    """The answer to one of our requests; ``method`` is the method we had called."""

    id: RequestId
    method: str
    result: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class MalformedMessage:
    """A line that is not a JSON-RPC message, or a response to nothing we asked."""

    line: str
    reason: str


@dataclass(frozen=True)
class InvalidRequest:
    """A request we cannot serve as sent (its id is not a string or an integer); ``reply`` is the
    error answer to write, so the agent hears why."""

    line: str
    reply: bytes


JsonRpcEvent = IncomingRequest | IncomingNotification | IncomingResponse | InvalidRequest | MalformedMessage


class JsonRpcPeer:
    """Builds our messages and classifies the agent's.  Holds the ids of our unanswered requests."""

    def __init__(self, *, jsonrpc_field: bool = True) -> None:
        self._jsonrpc = jsonrpc_field
        self._next_id = 1
        self.pending: dict[RequestId, str] = {}

    # --- outgoing -----------------------------------------------------------------------------

    def request(self, method: str, params: Any = None) -> tuple[RequestId, bytes]:
        request_id = self._next_id
        self._next_id += 1
        self.pending[request_id] = method
        return request_id, self._line({"id": request_id, "method": method, **_params(params)})

    def notify(self, method: str, params: Any = None) -> bytes:
        return self._line({"method": method, **_params(params)})

    def respond(self, request_id: RequestId, result: Any) -> bytes:
        return self._line({"id": request_id, "result": result})

    def respond_error(self, request_id: RequestId | None, code: int, message: str, data: Any = None) -> bytes:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        return self._line({"id": request_id, "error": error})

    def _line(self, obj: dict[str, Any]) -> bytes:
        if self._jsonrpc:
            obj = {"jsonrpc": "2.0", **obj}
        return orjson.dumps(obj) + b"\n"

    # --- incoming -----------------------------------------------------------------------------

    def receive_line(self, line: str) -> JsonRpcEvent:
        """One line as text (tests, tools): parsed here; the live run hands :meth:`receive` the
        line its wire parsed already."""
        return self.receive(parse_line(line))

    def receive(self, message: WireLine) -> JsonRpcEvent:
        """Classify one line of the agent's, parsed once by the wire (its JSON value is read here,
        never parsed again)."""
        obj = message.value
        if type(obj) is not dict:
            return MalformedMessage(
                message.text, "not JSON" if message.error == "not JSON" else "not a JSON object"
            )
        method = obj.get("method")
        has_id = "id" in obj and _valid_id(obj["id"])
        if "id" in obj and not has_id:
            if isinstance(method, str):
                reason = f"Invalid Request: id {obj['id']!r} is not a string or an integer"
                return InvalidRequest(message.text, self.respond_error(None, INVALID_REQUEST, reason[:200]))
            return MalformedMessage(message.text, "a message whose id is not a string or an integer")
        if isinstance(method, str):
            if has_id:
                return IncomingRequest(obj["id"], method, obj.get("params"))
            return IncomingNotification(method, obj.get("params"))
        if has_id and ("result" in obj or "error" in obj):
            ours = self.pending.pop(obj["id"], None)
            if ours is None:
                return MalformedMessage(
                    message.text, f"a response to request {obj['id']!r}, which we never sent"
                )
            error = obj.get("error")
            if error is not None and not isinstance(error, dict):
                error = {"code": INTERNAL_ERROR, "message": str(error)}
            return IncomingResponse(obj["id"], ours, obj.get("result"), error)
        return MalformedMessage(message.text, "neither a request, a notification nor a response")


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _params(params: Any) -> dict[str, Any]:
    return {} if params is None else {"params": params}
