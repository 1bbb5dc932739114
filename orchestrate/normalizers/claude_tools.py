"""Claude Code's tools mapped onto our action kinds, and their results onto tool entries."""

from __future__ import annotations

import re
from typing import Any

from ..entries import (
    NO_EXIT_CODE,
    ActionType,
    CommandResult,
    CommandRun,
    FileChange,
    FileEdit,
    FileRead,
    FileWrite,
    GenericTool,
    PlanItem,
    Search,
    TaskAction,
    ToolResult,
    ToolUseEntry,
    WebFetch,
)
from .built import tool_result
from .diffs import diff_from_hunks, diff_texts
from .evolve import evolve, make
from .values import text as _s

__all__ = ["action_for", "plan_items", "result_text", "tool_result_of"]

_EXIT_CODE = re.compile(r"^Exit code (\d+)")
_PLAN_STATUSES = {"pending", "in_progress", "completed"}


def action_for(name: str, args: dict[str, Any]) -> ActionType:
    """The action a tool call performs, from its name and (possibly still partial) input."""
    path = _s(args.get("file_path") or args.get("notebook_path") or args.get("path"))
    match name:
        case "Bash":
            return make(CommandRun, command=_s(args.get("command")))
        case "Read":
            return make(FileRead, path=path)
        case "Write":
            diff = diff_texts(path, "", _s(args.get("content")), created=True)
            return make(FileWrite, path=path, changes=(make(FileChange, type="create", unified_diff=diff),))
        case "Edit":
            return make(FileEdit, path=path, changes=(_edit_change(path, args),))
        case "MultiEdit":
            edits = [e for e in args.get("edits") or [] if isinstance(e, dict)]
            return make(FileEdit, path=path, changes=tuple(_edit_change(path, e) for e in edits))
        case "Grep" | "Glob":
            return make(Search, query=_s(args.get("pattern")), path=_s(args.get("path")) or None)
        case "WebSearch":
            return make(Search, query=_s(args.get("query")))
        case "WebFetch":
            return make(WebFetch, url=_s(args.get("url")), prompt=_s(args.get("prompt")) or None)
        case "Task" | "Agent":
            return make(
                TaskAction,
                description=_s(args.get("description")),
                prompt=_s(args.get("prompt")) or None,
                subagent_type=_s(args.get("subagent_type")) or None,
            )
        case _:
            return make(GenericTool, tool_name=name, args=args)


def _edit_change(path: str, edit: dict[str, Any]) -> FileChange:
    return make(
        FileChange,
        type="edit",
        unified_diff=diff_texts(path, _s(edit.get("old_string")), _s(edit.get("new_string"))),
    )


def plan_items(args: dict[str, Any]) -> tuple[PlanItem, ...]:
    """TodoWrite's ``todos`` as plan items; unknown statuses count as pending."""
    items = []
    for todo in args.get("todos") or []:
        if not isinstance(todo, dict):
            continue
        status = todo.get("status")
        items.append(
            make(
                PlanItem,
                content=_s(todo.get("content") or todo.get("activeForm")),
                status=status if status in _PLAN_STATUSES else "pending",
                priority=_s(todo.get("priority")) or None,
            )
        )
    return tuple(items)


def result_text(content: Any) -> str:
    """The text of a tool_result's ``content``: a string or a list of text/image blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            _s(b.get("text")) if isinstance(b, dict) and b.get("type") == "text" else "[non-text block]"
            for b in content
        ]
        return "\n".join(parts)
    return _s(content)


def tool_result_of(
    tool: ToolUseEntry, text: str, is_error: bool, extra: Any
) -> tuple[ActionType, ToolResult]:
    """The call's action and result once its result arrived (the same action when the result
    changes nothing of it).  ``extra`` is the CLI's ``tool_use_result``."""
    action = tool.action
    detail = extra if isinstance(extra, dict) else {}
    match action:
        case CommandRun():
            action = evolve(action, result=_command_result(text, is_error, detail))
        case FileWrite() | FileEdit():
            action = _refine_file_action(action, detail)
        case GenericTool():
            action = evolve(action, result=extra if extra is not None else text)
        case _:
            pass
    return action, tool_result(not is_error, None if is_error else text, text if is_error else None)


def _command_result(text: str, is_error: bool, detail: dict[str, Any]) -> CommandResult | None:
    if "stdout" in detail:  # the command ran: the CLI reports its streams separately
        m = _EXIT_CODE.match(text) if is_error else None
        if detail.get("interrupted") or (is_error and m is None):
            code = NO_EXIT_CODE
        else:
            code = int(m.group(1)) if m else 0
        return make(
            CommandResult,
            exit_code=code,
            stdout=_s(detail.get("stdout")),
            stderr=_s(detail.get("stderr")) or None,
        )
    if not is_error:
        return make(CommandResult, exit_code=0, stdout=text)
    # Failures arrive as "Exit code N\n<output>" (CLI 2.1.330); a denial or a tool error has no code
    # and no output of the command.
    m = _EXIT_CODE.match(text)
    if m is None:
        return None  # the command never ran: no result of it
    return make(CommandResult, exit_code=int(m.group(1)), stdout=text[m.end() :].lstrip("\n") or None)


def _refine_file_action(action: FileWrite | FileEdit, detail: dict[str, Any]) -> FileWrite | FileEdit:
    # Once applied, the CLI reports what really changed: prefer its hunks over our guess from the input.
    hunks = detail.get("structuredPatch")
    diff = diff_from_hunks(action.path, hunks) if isinstance(hunks, list) and hunks else None
    if diff is None and detail.get("type") == "update" and isinstance(detail.get("originalFile"), str):
        diff = diff_texts(action.path, detail["originalFile"], _s(detail.get("content")))
    if diff is None:
        return action
    change = make(FileChange, type="create" if detail.get("type") == "create" else "edit", unified_diff=diff)
    return evolve(action, changes=(change,))
