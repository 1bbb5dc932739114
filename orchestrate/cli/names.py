"""Tool names for a person: what the tool does, the same for every agent.

Claude calls its shell ``Bash``, Codex ``commandExecution``, Gemini ``run_shell_command``; the entry
keeps the agent's own name (``tool_name``, part of the JSON contract), and the screen shows the name of
the action instead, so one run reads like another whichever agent made it.  The agent's name is still
there for whoever asks (``--verbose``).
"""

from __future__ import annotations

import re

from ..entries import (
    CommandRun,
    FileEdit,
    FileRead,
    FileWrite,
    GenericTool,
    Search,
    TaskAction,
    ToolUseEntry,
    WebFetch,
)

__all__ = ["display_name", "mcp_name"]

_BY_ACTION: dict[type, str] = {
    CommandRun: "Shell",
    FileRead: "Read",
    FileWrite: "Write",
    FileEdit: "Edit",
    Search: "Search",
    WebFetch: "Fetch",
    TaskAction: "Task",
}

# How the agents spell an MCP tool: Claude `mcp__server__tool`, Codex `mcp:server/tool`,
# Cursor `mcp:server:tool`.
_MCP = (
    re.compile(r"^mcp__(?P<server>.+?)__(?P<tool>.+)$"),
    re.compile(r"^mcp:(?P<server>[^/:]*)[/:](?P<tool>.+)$"),
)


def mcp_name(tool_name: str) -> str | None:
    """``mcp: server/tool`` for an MCP tool's name as any agent spells it; None for another tool."""
    for pattern in _MCP:
        if m := pattern.match(tool_name):
            return f"mcp: {m['server']}/{m['tool']}"
    return None


def display_name(tool: ToolUseEntry, verbose: bool = False) -> str:
    """The name to show for ``tool``; with ``verbose``, the agent's own name follows when it differs."""
    action = tool.action
    name = _BY_ACTION.get(type(action))
    if isinstance(action, FileEdit) and action.changes and all(c.type == "delete" for c in action.changes):
        name = "Delete"
    if name is None:
        generic = action.tool_name if isinstance(action, GenericTool) else tool.tool_name
        name = mcp_name(tool.tool_name) or mcp_name(generic) or tool.tool_name
    if verbose and tool.tool_name != name:
        return f"{name} ({tool.tool_name})"
    return name
