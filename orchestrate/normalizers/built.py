"""The few entry parts made on most lines of a one-shot run (a tool call, its result, a turn's
usage), built directly.

:func:`~.evolve.make` is generic: it copies the class's defaults, merges the keywords, checks
them and makes a set of the fields given, about 1 µs a model; a run of codex exec or Cursor makes
a few of these per line.  Here each is one dict literal in the model's field order (the JSON
form's key order) with its defaults, and the set of fields given shared (pydantic never changes a
frozen model's set in place).  The result is what ``make`` gives for the same values, which
``tests/test_exec_cursor_shortcuts.py`` checks against the validating constructors: a field added
to one of these models fails that test instead of being missed here.
"""

from __future__ import annotations

from typing import Any

from ..entries import (
    ActionType,
    CommandResult,
    CommandRun,
    ErrorEntry,
    ErrorInfo,
    TokenUsage,
    TokenUsageEntry,
    ToolResult,
    ToolStatus,
    ToolUse,
    ToolUseEntry,
)
from .evolve import _new, _set_dict, _set_extra, _set_fields_set, _set_private

__all__ = [
    "command_result",
    "command_run",
    "error_entry",
    "tool_call",
    "tool_result",
    "tool_use",
    "turn_usage",
    "usage_entry",
]

_TOOL_USE_SET = {"tool"}
_TOOL_CALL_SET = {"tool_name", "action", "status", "result", "tool_call_id"}
_RESULT_SET = {"success", "data", "error"}
_USAGE_SET = {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"}
_USAGE_ALL_SET = {*_USAGE_SET, "total_cost_usd", "context_window"}
_USAGE_ENTRY_SET = {"usage"}
_COMMAND_SET = {"command"}
_COMMAND_DONE_SET = {"command", "result"}
_COMMAND_RESULT_SET = {"exit_code", "stdout", "stderr"}
_ERROR_INFO_SET = {"message", "code"}
_ERROR_ENTRY_SET = {"error"}


def tool_use(tool: ToolUseEntry) -> ToolUse:
    """``make(ToolUse, tool=tool)``."""
    new = _new(ToolUse)
    _set_dict(new, {"kind": "tool_use", "tool": tool})
    _set_fields_set(new, _TOOL_USE_SET)
    _set_extra(new, None)
    _set_private(new, None)
    return new


def tool_call(
    tool_name: str,
    action: ActionType,
    status: ToolStatus,
    result: ToolResult | None,
    tool_call_id: str | None,
) -> ToolUseEntry:
    """``make(ToolUseEntry, ...)`` with these five fields (no approval)."""
    new = _new(ToolUseEntry)
    _set_dict(
        new,
        {
            "tool_name": tool_name,
            "action": action,
            "status": status,
            "result": result,
            "approval": None,
            "tool_call_id": tool_call_id,
        },
    )
    _set_fields_set(new, _TOOL_CALL_SET)
    _set_extra(new, None)
    _set_private(new, None)
    return new


def tool_result(success: bool, data: Any, error: str | None) -> ToolResult:
    """``make(ToolResult, success=..., data=..., error=...)``."""
    new = _new(ToolResult)
    _set_dict(new, {"success": success, "data": data, "error": error})
    _set_fields_set(new, _RESULT_SET)
    _set_extra(new, None)
    _set_private(new, None)
    return new


def turn_usage(
    input_tokens: int,
    output_tokens: int,
    cache_read: int,
    cache_write: int,
    total_cost_usd: float | None = None,
    context_window: int | None = None,
) -> TokenUsage:
    """``make(TokenUsage, ...)`` with the four counts, and the cost and context window when known."""
    new = _new(TokenUsage)
    _set_dict(
        new,
        {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_tokens": cache_read,
            "cache_write_tokens": cache_write,
            "total_cost_usd": total_cost_usd,
            "context_window": context_window,
        },
    )
    _set_fields_set(new, _USAGE_SET if total_cost_usd is None and context_window is None else _USAGE_ALL_SET)
    _set_extra(new, None)
    _set_private(new, None)
    return new


def usage_entry(usage: TokenUsage) -> TokenUsageEntry:
    """``make(TokenUsageEntry, usage=usage)``."""
    new = _new(TokenUsageEntry)
    _set_dict(new, {"kind": "token_usage", "usage": usage})
    _set_fields_set(new, _USAGE_ENTRY_SET)
    _set_extra(new, None)
    _set_private(new, None)
    return new


def command_run(command: str, result: CommandResult | None = None) -> CommandRun:
    """``make(CommandRun, command=command)``, or with ``result=result`` when there is one."""
    new = _new(CommandRun)
    _set_dict(new, {"kind": "command_run", "command": command, "result": result})
    _set_fields_set(new, _COMMAND_SET if result is None else _COMMAND_DONE_SET)
    _set_extra(new, None)
    _set_private(new, None)
    return new


def command_result(exit_code: int, stdout: str | None, stderr: str | None) -> CommandResult:
    """``make(CommandResult, exit_code=..., stdout=..., stderr=...)``: ``exit_code`` an int already
    (the constructor's hook turns None into ``NO_EXIT_CODE``; the callers do)."""
    new = _new(CommandResult)
    _set_dict(new, {"exit_code": exit_code, "stdout": stdout, "stderr": stderr, "duration_ms": None})
    _set_fields_set(new, _COMMAND_RESULT_SET)
    _set_extra(new, None)
    _set_private(new, None)
    return new


def error_entry(message: str, code: str) -> ErrorEntry:
    """``ErrorEntry(error=ErrorInfo(message=message, code=code))`` for a ``message`` and ``code``
    that are ``str`` already (the caller checks: every error entry of every protocol is made
    here, and a run of codex exec or Cursor that fails makes one or two)."""
    info = _new(ErrorInfo)
    _set_dict(info, {"message": message, "code": code, "stack": None})
    _set_fields_set(info, _ERROR_INFO_SET)
    _set_extra(info, None)
    _set_private(info, None)
    new = _new(ErrorEntry)
    _set_dict(new, {"kind": "error", "error": info})
    _set_fields_set(new, _ERROR_ENTRY_SET)
    _set_extra(new, None)
    _set_private(new, None)
    return new
