"""Our own table of tools that only look.  An agent's label ("kind": "read", a "readOnly" hint) is
never trusted: the agent chose it.  Tools that reach the network (WebFetch, WebSearch) are not
read-only: a request can carry what was read out."""

from __future__ import annotations

__all__ = ["READ_ONLY_TOOLS", "is_read_only_tool", "mcp_server"]

READ_ONLY_TOOLS = frozenset(
    {
        # Claude Code
        "Read",
        "Grep",
        "Glob",
        "LS",
        "NotebookRead",
        "TodoWrite",  # the agent's own to-do list: nothing on disk or on the network
        "TodoRead",
        "BashOutput",  # output of a shell the agent already started
        # Gemini CLI and Qwen Code (over ACP)
        "read_file",
        "read_many_files",
        "list_directory",
        "glob",
        "search_file_content",
        "grep_search",
        "todo_write",
        # Cursor
        "read",
        "ls",
        "grep",
    }
)


def is_read_only_tool(tool_name: str) -> bool:
    return tool_name in READ_ONLY_TOOLS


def mcp_server(tool_name: str) -> str | None:
    """The server of an MCP tool named ``mcp__<server>__<tool>`` (Claude Code's form), or None."""
    prefix, _, rest = tool_name.partition("__")
    server, sep, tool = rest.partition("__")
    return server if prefix == "mcp" and server and sep and tool else None
