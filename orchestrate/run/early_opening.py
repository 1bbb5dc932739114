"""Which agent started early may be sent its first message before its run adopts it, and what.

Claude Code prints nothing until it has read its first message, so an agent spawned early
(cli/early.py) but sent its prompt only once the run is loaded still makes its first entry wait
for all of that.  Writing the prompt right after the spawn ends the wait, and trades away "an agent
whose run is refused never receives a prompt": a refused run's agent has then read the prompt (and
may have sent it to its model) before it is killed.  What it must not have done is change
anything, so the early write is made only where the agent asks us before every tool that changes
anything and waits for the answer (executors/claude_asks.py says when Claude Code does): its
question then waits in the pipe until the run adopts the process and answers it through its whole
approval pipeline, or is killed with it.

The lines are made by the driver's own code (peers/claude_opening.py); the run that adopts the
process records them as written by itself (the raw log's stdin records, the normalizer's feed, the
driver's peer state).  Loaded before anyio and pydantic: this module imports neither.

A handshake is different: Codex's app-server and every ACP agent answer nothing before
``initialize``, which carries no prompt and asks for nothing to be done (peers/handshake.py).  It is
written right after every early spawn of one (not only with ``ORCHESTRATE_EARLY=write``): the agent
answers while our run loads, and a refused run's agent has been told only who would drive it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..executors.base import Executor, find_program

if TYPE_CHECKING:
    from ..peers.claude_opening import ClaudeOpening
    from ..peers.handshake import Handshake
    from ..process.spec import ProcessSpec

__all__ = ["EARLY_WRITE_MAX", "early_handshake", "early_opening", "refused_opening", "why_not_early"]

EARLY_WRITE_MAX = 16 * 1024
"""The most written early: all of it goes into the empty pipe at once (a pipe holds 64 KiB, or a
page or two when the user's pipe memory is used up; prestart.py checks the pipe's own size)."""


def why_not_early(executor: Executor, spec: ProcessSpec) -> str | None:
    """None when ``executor``'s process ``spec`` may be sent its first lines before adoption; else
    why not."""
    # (Imported here: a Codex run's handshake needs none of Claude's modules.)
    from ..executors.claude_asks import always_asks
    from ..executors.claude_code import ClaudeCodeExecutor

    # Only the Claude driver (run/claude.py) takes over lines written for it, and only the exact
    # class: a subclass may write or drive differently.
    if type(executor) is not ClaudeCodeExecutor or (executor.driver or executor.protocol) != "stream-json":
        return f"{executor.name} takes no first message before its run adopts it"
    program = None if executor.options.base_command else find_program(executor.program or "")
    return always_asks(spec.argv, spec.env, spec.cwd, program)


def early_opening(executor: Executor, spec: ProcessSpec, prompt: str) -> ClaudeOpening | str:
    """The lines to write to ``executor``'s process ``spec`` for ``prompt`` right after its spawn,
    made by the driver's own code; or why none."""
    reason = why_not_early(executor, spec)
    if reason is not None:
        return reason
    from ..peers.claude_opening import open_claude

    if prompt.lstrip().startswith("/"):
        # A slash command is run by the CLI itself, asking no one: a project command's `!` lines
        # under its own allowed-tools, or a built-in that writes (/heapdump).
        return "a slash command is run without asking"
    opening = open_claude(prompt)
    if sum(len(line) for line in opening.lines) > EARLY_WRITE_MAX:
        return "the first message is too long to be written before the run exists"
    return opening


def early_handshake(executor: Executor) -> Handshake | None:
    """The handshake to write to ``executor``'s agent right after its spawn, made by the code its
    driver runs; None if it has none.  Codex's app-server (the exact class: a subclass may open its
    conversation differently) and every ACP agent (all spoken to by one driver, which opens every
    conversation the same way).  The run's driver takes it over only if it would have written
    those very bytes (:meth:`~orchestrate.run.driver.Driver.takes_opening`)."""
    protocol = executor.driver or executor.protocol
    if protocol == "acp":
        from ..executors.acp import AcpExecutor

        if not isinstance(executor, AcpExecutor):
            return None
        from ..peers.acp_opening import open_acp

        return open_acp()
    if protocol != "jsonrpc" or type(executor).__name__ != "CodexExecutor":  # (no import for others)
        return None
    from ..executors.codex import CodexExecutor

    if type(executor) is not CodexExecutor:
        return None
    from ..peers.codex_opening import open_codex

    return open_codex()


def refused_opening(executor: Executor, spec: ProcessSpec, opening: object) -> str | None:
    """None when ``opening``, written before the run adopted ``executor``'s process ``spec``, may
    have been: a handshake to an agent that takes one, or a prompt to one that asks before acting
    (:func:`why_not_early`); else why not."""
    if getattr(opening, "prompt", None) is None:
        handshake = early_handshake(executor)
        if handshake is None or handshake.lines != getattr(opening, "lines", None):
            return f"{executor.name} takes no such handshake before its run adopts it"
        return None
    return why_not_early(executor, spec)
