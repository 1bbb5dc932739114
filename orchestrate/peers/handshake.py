"""A JSON-RPC agent's handshake, written before the run exists: the request, and the peer that sent it.

Codex's app-server and every ACP agent answer nothing before ``initialize``, a request that carries
no prompt and asks for nothing to be done (who the client is, what it can do).  ``orchestrate
run``'s early start writes it right after the agent's spawn (run/early_opening.py), made by the
code the driver runs itself (peers/codex_opening.py, peers/acp_opening.py), so the agent answers
while the CLI, the event loop and the run are still loading; the driver that adopts the process
takes those bytes over: its own peer makes them again, unwritten, and so holds the request it waits
an answer for (never the early peer, whose state nothing checks against its bytes).

Sans-I/O, and light: no anyio, no pydantic (the early start imports it).
"""

from __future__ import annotations

from typing import Any

from .jsonrpc import JsonRpcPeer, RequestId

__all__ = ["Handshake", "handshake"]


class Handshake:
    """The ``initialize`` request written to an agent (:attr:`lines`, one line), and the peer that
    wrote it (whose :attr:`~JsonRpcPeer.pending` holds it).  ``prompt`` is None: no prompt goes with
    it, which is what lets it be written before the run has checked its options."""

    __slots__ = ("lines", "peer", "request_id")

    prompt = None

    def __init__(self, peer: JsonRpcPeer, request_id: RequestId, line: bytes) -> None:
        self.peer = peer
        self.request_id = request_id
        self.lines: tuple[bytes, ...] = (line,)


def handshake(peer: JsonRpcPeer, params: dict[str, Any]) -> Handshake:
    """``initialize`` with ``params``, as ``peer``'s next request."""
    request_id, line = peer.request("initialize", params)
    return Handshake(peer, request_id, line)
