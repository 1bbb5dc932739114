"""The built-in tools of OpenCode, Copilot CLI, Factory Droid and Gemini CLI, mapped onto our action
kinds through the names Claude Code gives the same tools: one meaning, one shape, whoever ran it."""

from __future__ import annotations

import re
from typing import Any

from ..entries import NO_EXIT_CODE, ActionType, CommandResult, CommandRun, PlanItem, PlanStatus
from .claude_tools import action_for, plan_items
from .evolve import evolve

__all__ = ["TODO_TOOLS", "named_action", "todo_items", "with_output"]

# tool name (lowercased) -> Claude Code's name for the same tool
_ALIASES = {
    "bash": "Bash",
    "execute": "Bash",
    "run_shell_command": "Bash",
    "shell": "Bash",
    "read": "Read",
    "view": "Read",
    "read_file": "Read",
    "write": "Write",
    "create": "Write",
    "write_file": "Write",
    "edit": "Edit",
    "replace": "Edit",
    "str_replace": "Edit",
    "multiedit": "MultiEdit",
    "grep": "Grep",
    "search_file_content": "Grep",
    "glob": "Glob",
    "ls": "Glob",
    "list_directory": "Glob",
    "webfetch": "WebFetch",
    "web_fetch": "WebFetch",
    "websearch": "WebSearch",
    "google_web_search": "WebSearch",
    "task": "Task",
}
# argument name -> Claude Code's, for the file tools (a search's `path` is a directory: kept as is)
_FILE_KEYS = {
    "filePath": "file_path",
    "absolute_path": "file_path",
    "path": "file_path",
    "oldString": "old_string",
    "old_str": "old_string",
    "newString": "new_string",
    "new_str": "new_string",
    "file_text": "content",
}
TODO_TOOLS = {"todowrite", "todo_write", "write_todos", "update_todo"}
_TODO_LINE = re.compile(r"^\s*(?:[-*]|\d+[.)])?\s*\[([a-z_ ]+)\]\s*(.+?)\s*$", re.IGNORECASE)
_STATUSES: dict[str, PlanStatus] = {
    "pending": "pending",
    "todo": "pending",
    " ": "pending",
    "in_progress": "in_progress",
    "in progress": "in_progress",
    "completed": "completed",
    "done": "completed",
    "x": "completed",
    "cancelled": "cancelled",
}


def named_action(name: str, args: dict[str, Any]) -> ActionType:
    """The action of tool ``name`` called with ``args`` (anything unknown is a generic tool)."""
    canonical = _ALIASES.get(name.lower())
    if canonical is None:
        return action_for(name, args)  # (its generic-tool case keeps the agent's own name)
    if canonical in ("Read", "Write", "Edit", "MultiEdit"):
        args = {_FILE_KEYS.get(k, k): v for k, v in args.items()}
    elif canonical == "Glob" and "pattern" not in args:
        args = {**args, "pattern": args.get("patterns") or args.get("directory_path") or args.get("path")}
    if isinstance(args.get("pattern"), list):
        args = {**args, "pattern": " ".join(str(p) for p in args["pattern"])}
    return action_for(canonical, args)


def todo_items(args: dict[str, Any]) -> tuple[PlanItem, ...]:
    """A todo tool's list: objects (``content``/``status``), or Droid's text, one ``[status] item``
    per line."""
    todos = args.get("todos")
    if isinstance(todos, list):
        return plan_items(args)
    items = []
    for line in str(todos or "").splitlines():
        match = _TODO_LINE.match(line)
        if match:
            status = _STATUSES.get(match.group(1).lower(), "pending")
            items.append(PlanItem(content=match.group(2), status=status))
    return tuple(items)


def with_output(action: ActionType, output: str | None, exit_code: int | None) -> ActionType:
    """A command's action with what it printed and how it exited (other actions unchanged)."""
    if not isinstance(action, CommandRun):
        return action
    code = exit_code if exit_code is not None else _exit_marker(output)
    code = NO_EXIT_CODE if code is None else code  # the seed's exitCode is always a number
    return evolve(action, result=CommandResult(exit_code=code, stdout=output or None))


_EXIT_MARK = re.compile(r"(?:exited with code|exit code) (-?\d+)", re.IGNORECASE)


def _exit_marker(output: str | None) -> int | None:
    """The exit code a CLI writes into a command's output (Droid: "[Process exited with code 0]",
    Copilot: "<shellId: 0 completed with exit code 0>")."""
    match = _EXIT_MARK.search(output or "")
    return int(match.group(1)) if match else None
