"""What a client writes first to an ACP agent: one code for the run's driver and the CLI's early start.

An ACP agent answers nothing before ``initialize`` (the protocol's version, what the client can do,
who it is): the early start writes it right after the spawn (peers/handshake.py), and the agent
answers while the run loads.  An agent whose run is then refused has only been told who would
drive it; it is killed before it is sent anything else.

Sans-I/O, and light: no anyio, no pydantic, no ACP SDK (the early start imports it).
"""

from __future__ import annotations

from typing import Any

from .handshake import Handshake, handshake
from .jsonrpc import JsonRpcPeer

__all__ = ["INITIALIZE", "PROTOCOL_VERSION", "open_acp"]

PROTOCOL_VERSION = 1
# What the ACP SDK's InitializeRequest dumps to (tests/test_acp_params.py builds it and compares):
# a constant, since building it imported the SDK's 273 models at every run's start (acp_params.py).
INITIALIZE: dict[str, Any] = {
    "protocolVersion": PROTOCOL_VERSION,
    "clientCapabilities": {
        "fs": {"readTextFile": True, "writeTextFile": True},
        "terminal": True,
        "auth": {"terminal": False},
        # Forms and URLs are put to the person through the approval service (acp_elicitation).
        "elicitation": {"form": {}, "url": {}},
    },
    "clientInfo": {"name": "orchestrate", "title": "orchestrate", "version": "0.1.0"},
}


def open_acp(peer: JsonRpcPeer | None = None) -> Handshake:
    """``initialize``, as the first line of a conversation (``peer``: a fresh one by default)."""
    return handshake(peer if peer is not None else JsonRpcPeer(), INITIALIZE)
