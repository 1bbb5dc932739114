"""What a client writes first to Codex's app-server: one code for the run's driver and the CLI's early start.

The app-server answers nothing before ``initialize``, and its first notices (a configuration
warning, say) come right after that answer: the handshake is on the path to the first entry, and
the early start writes it (peers/handshake.py).  An agent whose run is then refused has only been
told who would drive it; it is killed before it is sent anything else.

Sans-I/O, and light: no anyio, no pydantic (the early start imports it).
"""

from __future__ import annotations

from .handshake import Handshake, handshake
from .jsonrpc import JsonRpcPeer

__all__ = ["CLIENT_INFO", "INITIALIZE_PARAMS", "codex_peer", "open_codex"]

CLIENT_INFO = {"name": "orchestrate", "title": "orchestrate", "version": "0.1.0"}
INITIALIZE_PARAMS = {"clientInfo": CLIENT_INFO, "capabilities": {"experimentalApi": False}}


def codex_peer() -> JsonRpcPeer:
    """The JSON-RPC peer Codex is spoken to with: Codex's own client sends no ``"jsonrpc"`` field,
    and we match it (protocols/codex.md §4)."""
    return JsonRpcPeer(jsonrpc_field=False)


def open_codex(peer: JsonRpcPeer | None = None) -> Handshake:
    """``initialize``, as the first line of a conversation (``peer``: a fresh one by default)."""
    return handshake(peer if peer is not None else codex_peer(), INITIALIZE_PARAMS)
