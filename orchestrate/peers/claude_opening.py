"""What a client writes first to Claude Code: one code for the run's driver and the CLI's early start.

The driver (run/claude.py) opens a conversation with these lines, and so does ``orchestrate run``'s
early start (cli/early.py), right after it spawns the agent, before the run, the event loop or
pydantic exist: Claude Code prints nothing until it has read its first message, so the prompt
written a few hundred milliseconds earlier is its first entry that much earlier.  Both call
:func:`open_claude`, so the bytes cannot differ; the run that adopts the process takes over the
peer in the state writing them left it (the ``initialize`` request it waits an answer for).

Sans-I/O, and light: no anyio, no pydantic (the early start imports it).
"""

from __future__ import annotations

from dataclasses import dataclass

from .claude_control import ClaudeControlPeer

__all__ = ["ClaudeOpening", "open_claude"]


@dataclass(frozen=True)
class ClaudeOpening:
    """The first lines written to a Claude Code process, for ``prompt``, and the peer after them."""

    prompt: str
    peer: ClaudeControlPeer
    lines: tuple[bytes, ...]


def open_claude(prompt: str, peer: ClaudeControlPeer | None = None) -> ClaudeOpening:
    """``initialize`` (optional for approvals, but it makes the CLI report its capabilities, and it is
    what the official SDK does; its answer is not waited for), then the prompt as the first user
    message."""
    peer = peer if peer is not None else ClaudeControlPeer()
    _, initialize = peer.request("initialize", hooks=None)
    return ClaudeOpening(prompt, peer, (initialize, peer.user_message(prompt)))
