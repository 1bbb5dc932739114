"""Render entry patches for a person, append-only, so it works in a terminal and in a pipe alike.

Text of the entry being streamed is printed as it grows; a tool call gets a line when it starts and
one when it settles (with its result); nothing printed is ever rewritten.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from ..entries import (
    CommandRun,
    EntryPatch,
    ErrorEntry,
    FileEdit,
    FileWrite,
    NormalizedEntry,
    Plan,
    PlanItem,
    TokenUsageEntry,
    ToolUse,
)

__all__ = ["TextRenderer"]

_STREAMED = ("assistant_message", "thinking")
_SETTLED = ("success", "failed", "denied", "timed_out", "cancelled")
_STATUS_STYLE = {
    "success": "green",
    "failed": "red",
    "denied": "yellow",
    "timed_out": "yellow",
    "cancelled": "yellow",
    "pending_approval": "magenta",
}
_MAX_OUTPUT_LINES = 12


class TextRenderer:
    def __init__(self, console: Console) -> None:
        self.console = console
        self._printed: dict[int, str] = {}  # streamed entry -> its text as printed so far
        self._open: int | None = None  # the entry whose text is mid-line
        self._tool_state: dict[int, str] = {}
        self._plans: dict[int, tuple[PlanItem, ...]] = {}

    def on_patch(self, patch: EntryPatch) -> None:
        entry = patch.entry
        kind = entry.type.kind
        if kind in _STREAMED:
            self._stream(entry)
        elif isinstance(entry.type, ToolUse):
            self._tool(entry, entry.type)
        elif isinstance(entry.type, Plan):
            # A plan streams in (first empty, then whole) and is updated later: show each new version.
            if entry.type.items and self._plans.get(entry.index) != entry.type.items:
                self._plans[entry.index] = entry.type.items
                self._close_line()
                self._block(entry)
        elif patch.op == "add":
            self._close_line()
            self._block(entry)

    def finish(self) -> None:
        self._close_line()

    def _stream(self, entry: NormalizedEntry) -> None:
        printed = self._printed.get(entry.index)
        if self._open != entry.index:
            self._close_line()
            if printed is None:
                label = "thinking" if entry.type.kind == "thinking" else "assistant"
                self.console.print(f"[bold cyan]{label}[/]", end=" ")
            self._open = entry.index
        printed = printed or ""
        text = entry.content
        # Deltas only ever extend the text; if the agent rewrote it, print the new version whole.
        fresh = text[len(printed) :] if text.startswith(printed) else "\n" + text
        style = "dim italic" if entry.type.kind == "thinking" else None
        self.console.print(fresh, end="", style=style, markup=False, highlight=False)
        self._printed[entry.index] = text

    def _close_line(self) -> None:
        if self._open is not None:
            self.console.print()
            self._open = None

    def _tool(self, entry: NormalizedEntry, tool_use: ToolUse) -> None:
        tool = tool_use.tool
        previous = self._tool_state.get(entry.index)
        # "created" is not shown: its input may still be streaming in; the next status shows it whole.
        if previous == tool.status or tool.status == "created":
            return
        self._close_line()
        self._tool_state[entry.index] = tool.status
        style = _STATUS_STYLE.get(tool.status, "blue")
        head = f"[bold blue]⏺ {escape(tool.tool_name)}[/] {escape(entry.content)}"
        self.console.print(f"{head} [{style}]{tool.status.replace('_', ' ')}[/]")
        if tool.status in _SETTLED:
            self._tool_details(tool_use)

    def _tool_details(self, tool_use: ToolUse) -> None:
        tool, action = tool_use.tool, tool_use.tool.action
        if tool.approval and tool.approval.reason:
            self.console.print(f"  [yellow]reason:[/] {escape(tool.approval.reason)}")
        if isinstance(action, CommandRun) and action.result is not None:
            out = (action.result.stdout or "") + (action.result.stderr or "")
            self._indented(out)
            if action.result.exit_code not in (None, 0):
                self.console.print(f"  [red]exit code {action.result.exit_code}[/]")
        elif isinstance(action, FileWrite | FileEdit) and tool.status == "success":
            for change in action.changes:
                self._indented(change.unified_diff or "")
        elif tool.result is not None and tool.result.error and tool.status == "failed":
            self._indented(tool.result.error)

    def _indented(self, text: str) -> None:
        lines = text.rstrip("\n").splitlines()
        for line in lines[:_MAX_OUTPUT_LINES]:
            self.console.print("  │ " + line, markup=False, highlight=False, style="dim")
        if len(lines) > _MAX_OUTPUT_LINES:
            self.console.print(f"  │ … {len(lines) - _MAX_OUTPUT_LINES} more lines", style="dim")

    def _block(self, entry: NormalizedEntry) -> None:
        t = entry.type
        if isinstance(t, ErrorEntry):
            code = f" ({t.error.code})" if t.error.code else ""
            self.console.print(f"[bold red]error{code}[/] {escape(t.error.message)}")
        elif isinstance(t, TokenUsageEntry):
            u = t.usage
            cost = f", ${u.total_cost_usd:.4f}" if u.total_cost_usd is not None else ""
            self.console.print(f"[dim]tokens: {u.input_tokens} in, {u.output_tokens} out{cost}[/]")
        elif isinstance(t, Plan):
            self.console.print("[bold]plan[/]")
            marks = {"completed": "☒", "in_progress": "◐", "pending": "☐", "cancelled": "☓"}
            for item in t.items:
                self.console.print(f"  {marks[item.status]} {escape(item.content)}")
        elif t.kind == "user_message":
            self.console.print(f"[bold green]user[/] {escape(entry.content)}")
        else:
            self.console.print(f"[dim]{escape(entry.content)}[/]")
