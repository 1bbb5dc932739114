"""What a client writes first to Codex's app-server: one code for the run's driver and the CLI's early start.

The app-server answers nothing before ``initialize``, and its first notices (a configuration
warning, say) come right after that answer: the handshake is on the path to the first entry.  The
driver (run/codex.py) opens with :func:`open_codex`, and so does ``orchestrate run``'s early start
(cli/early.py), right after it spawns the agent, while the CLI, the event loop and the run are still
loading: the app-server then answers while we load, and its answer waits in the pipe for the run.
The run that adopts the process takes over the peer in the state writing it left (the request it
waits an answer for), so the bytes and the id cannot differ from what the driver writes itself.

``initialize`` carries no prompt and asks for nothing to be done: the client's name and whether it
wants experimental methods.  An agent whose run is then refused has only been told who would drive
it; it is killed before it is sent anything else.

Sans-I/O, and light: no anyio, no pydantic (the early start imports it).
"""

from __future__ import annotations

from .jsonrpc import JsonRpcPeer, RequestId

__all__ = ["CLIENT_INFO", "CodexOpening", "codex_peer", "open_codex"]

CLIENT_INFO = {"name": "orchestrate", "title": "orchestrate", "version": "0.1.0"}
INITIALIZE_PARAMS = {"clientInfo": CLIENT_INFO, "capabilities": {"experimentalApi": False}}


class CodexOpening:
    """The ``initialize`` request written to a Codex app-server, and the peer that wrote it (whose
    :attr:`~JsonRpcPeer.pending` holds it).  ``prompt`` is None: no prompt goes with it."""

    __slots__ = ("lines", "peer", "request_id")

    prompt = None

    def __init__(self, peer: JsonRpcPeer, request_id: RequestId, line: bytes) -> None:
        self.peer = peer
        self.request_id = request_id
        self.lines: tuple[bytes, ...] = (line,)


def codex_peer() -> JsonRpcPeer:
    """The JSON-RPC peer Codex is spoken to with: Codex's own client sends no ``"jsonrpc"`` field,
    and we match it (protocols/codex.md §4)."""
    return JsonRpcPeer(jsonrpc_field=False)


def open_codex(peer: JsonRpcPeer | None = None) -> CodexOpening:
    """``initialize``, as the first line of a conversation (``peer``: a fresh one by default)."""
    peer = peer if peer is not None else codex_peer()
    request_id, line = peer.request("initialize", INITIALIZE_PARAMS)
    return CodexOpening(peer, request_id, line)
