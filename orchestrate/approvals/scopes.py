"""The session's "always" memory, scoped to what the person saw.

"Always" for ``git log`` covers ``git log`` with any arguments, not every later ``Bash`` call; for a
program without subcommands (``ls -la``) it covers that program.  For a file tool it covers that
tool on files in the same directory (the directory itself, not below it); for a web tool, that
host; ``scope="mcp_server"`` covers every tool of one MCP server.  A line with redirections to
files, variable assignments or anything unreadable is remembered only as that exact line.  The
memory is looked at after the deny rules, so it never approves what they forbid."""

from __future__ import annotations

import posixpath
from typing import Literal
from urllib.parse import urlsplit

from .base import ApprovalRequest
from .commands import has_risky_option
from .facts import Facts
from .tools import mcp_server
from .words import SimpleCommand

__all__ = ["SessionScopes", "always_scopes"]

MAX_SCOPES = 1024  # a bound, not a limit anyone meets: past it, the person is asked again

# Programs whose first argument names what they do (git log, npm test, make deploy).
_SUBCOMMANDS = frozenset(
    {"git", "npm", "pnpm", "yarn", "bun", "npx", "cargo", "go", "docker", "podman", "kubectl", "helm"}
    | {"pip", "pip3", "uv", "poetry", "apt", "apt-get", "brew", "gh", "make", "just", "systemctl"}
    | {"dotnet", "mvn", "gradle", "terraform", "conda", "rustup", "deno", "composer", "bundle", "rake"}
)

Key = tuple[str, ...]


class SessionScopes:
    """Scopes a person approved "for the rest of this session"."""

    def __init__(self) -> None:
        self._scopes: dict[Key, str] = {}

    def remember(self, facts: Facts, scope: Literal["call", "mcp_server"]) -> tuple[str, ...]:
        """Store the scopes of ``facts``; returns them in words."""
        server = mcp_server(facts.request.tool_name)
        keys: list[tuple[Key, str]] = []
        if scope == "mcp_server" and server:
            keys.append((("mcp", server), f"every tool of MCP server {server}"))
        keys = keys or call_scopes(facts)
        for key, words in keys:
            if len(self._scopes) < MAX_SCOPES:
                self._scopes[key] = words
        return tuple(words for _, words in keys)

    def covers(self, facts: Facts) -> tuple[str, ...] | None:
        """The remembered scopes that together cover ``facts``, or None."""
        server = mcp_server(facts.request.tool_name)
        if server is not None and ("mcp", server) in self._scopes:
            return (self._scopes["mcp", server],)
        keys = call_scopes(facts)
        if all(key in self._scopes for key, _ in keys):
            return tuple(words for _, words in keys)
        return None


def always_scopes(request: ApprovalRequest) -> tuple[str, ...]:
    """What "always" would cover for ``request``, in words, for a prompt to show before it asks
    (``("Bash: git log",)``)."""
    return tuple(words for _, words in call_scopes(Facts.of(request)))


def call_scopes(facts: Facts) -> list[tuple[Key, str]]:
    """The scopes one call falls in, each with its description."""
    request = facts.request
    tool = request.tool_name
    scopes: list[tuple[Key, str]] = []
    line = facts.line
    if line is not None:
        if facts.clean_line:
            scopes += [_command_scope(tool, c) for c in line.runnable]
        else:
            scopes.append((("exact", tool, line.text), f"{tool}: exactly {line.text!r}"))
    for path in facts.request_paths:
        for form in path.forms:
            directory = posixpath.dirname(form)
            scopes.append((("dir", tool, directory), f"{tool} on files in {directory}"))
    if not scopes:
        host = _host(request.tool_input)
        scopes.append((("url", tool, host), f"{tool} on {host}") if host else (("tool", tool), tool))
    return scopes


def _command_scope(tool: str, command: SimpleCommand) -> tuple[Key, str]:
    program = command.words[0].text  # a clean line's programs are literal
    args = command.words[1:]
    if has_risky_option(command):
        # An option that writes or deletes elsewhere (git log --output, pytest --basetemp): what the
        # person saw is this exact command, not the program.
        return ("argv", tool, *(w.text for w in command.words)), f"{tool}: exactly {command}"
    if posixpath.basename(program) not in _SUBCOMMANDS:
        return ("cmd", tool, program, "*"), f"{tool}: {program}"
    if not args or (args[0].literal and not args[0].text.startswith("-")):
        sub = args[0].text if args else ""
        return ("cmd", tool, program, sub), f"{tool}: {program} {sub}".rstrip()
    # git -C dir log: options before the subcommand make the scope this exact command.
    return ("argv", tool, *(w.text for w in command.words)), f"{tool}: exactly {command}"


def _host(tool_input: object) -> str | None:
    url = tool_input.get("url") if isinstance(tool_input, dict) else None
    if not isinstance(url, str):
        return None
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None
