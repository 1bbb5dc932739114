"""What the one-shot JSONL formats of OpenCode, Copilot, Droid and Gemini share: a text entry per
message id, tool entries by call id, a todo tool shown as the plan, usage summed over a turn."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..entries import Plan, TokenUsage, TokenUsageEntry, ToolResult, ToolStatus, ToolUse, ToolUseEntry
from ..wire.framing import DEFAULT_MAX_LINE_BYTES
from .actions import describe
from .base import LineNormalizer
from .compiled import mypyc_attr
from .evolve import evolve
from .kinds import ASSISTANT, THINKING
from .named_tools import TODO_TOOLS, named_action, todo_items, with_output

__all__ = ["JsonlToolNormalizer"]

_DONE = ("success", "failed", "denied", "cancelled", "timed_out")


@mypyc_attr(allow_interpreted_subclasses=True)
class JsonlToolNormalizer(LineNormalizer):
    def __init__(self, max_line_bytes: int | None = None) -> None:
        super().__init__(max_line_bytes or DEFAULT_MAX_LINE_BYTES)
        self._texts: dict[str, int] = {}  # message (or part) id -> its entry
        self._tools: dict[str, int] = {}
        self._plan: int | None = None
        self._usage = TokenUsage()
        self._cwd: str | None = None
        self.log.track(self._tools)
        self.log.track(self._texts)

    # --- text ---------------------------------------------------------------------------------

    def text_delta(self, key: str, piece: str, ts: datetime | None, *, thinking: bool = False) -> None:
        index = self._texts.get(key)
        if index is None or index not in self.log:
            if piece:
                self._texts[key] = self.log.add(THINKING if thinking else ASSISTANT, piece, ts)
            return
        self.log.append_text(index, piece)

    def text_whole(self, key: str, whole: str, ts: datetime | None, *, thinking: bool = False) -> None:
        """A message whole: after its deltas it replaces them (shown once), else it is added."""
        index = self._texts.get(key)
        if index is not None and index in self.log:
            if not self.log.streamed(index).equals(whole):
                self.log.replace(index, content=whole)
        elif whole:
            self._texts[key] = self.log.add(THINKING if thinking else ASSISTANT, whole, ts)

    # --- tools --------------------------------------------------------------------------------

    def tool(
        self,
        call_id: str,
        name: str,
        args: dict[str, Any],
        status: ToolStatus,
        ts: datetime | None,
        *,
        output: str | None = None,
        error: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        """Create or move on the tool call ``call_id``; a todo tool becomes the plan instead."""
        if name.lower() in TODO_TOOLS:
            items = todo_items(args)
            if items:
                self._plan = self.log.put(self._plan, Plan(items=items), "Plan", ts)
            return
        index = self._tools.get(call_id)
        previous = self.log.tool(index) if index is not None else None
        if previous is not None and previous.status in _DONE and status in ("created", "running"):
            return  # (an event about the call that arrives after its result says nothing new)
        action = named_action(name, args) if args or previous is None else previous.action
        if status in ("success", "failed"):
            action = with_output(action, output if status == "success" else (output or error), exit_code)
        changes: dict[str, Any] = {"action": action, "status": status, "tool_name": name}
        if status in ("success", "failed", "denied"):
            changes["result"] = ToolResult(success=status == "success", data=output, error=error)
        content = describe(action, self._cwd)
        if index is None or previous is None:
            entry = evolve(ToolUseEntry(tool_name=name, action=action, tool_call_id=call_id), **changes)
            self._tools[call_id] = self.log.add(ToolUse(tool=entry), content, ts)
        else:
            self.log.update_tool(index, content=content, **changes)

    # --- usage and turns ----------------------------------------------------------------------

    def add_usage(self, **counts: Any) -> None:
        """Add one model call's counts (and cost) to the turn's."""
        usage = self._usage
        cost = counts.pop("total_cost_usd", None)
        window = counts.pop("context_window", None)
        if isinstance(cost, int | float):
            usage = evolve(usage, total_cost_usd=(usage.total_cost_usd or 0.0) + cost)
        if isinstance(window, int) and window > 0:
            usage = evolve(usage, context_window=window)
        sums = {k: getattr(usage, k) + int(v) for k, v in counts.items() if isinstance(v, int | float)}
        self._usage = evolve(usage, **sums)

    def end_turn(self, status: str, ts: datetime | None, **extra: Any) -> None:
        self.log.add(TokenUsageEntry(usage=self._usage), "", ts, **extra)
        self._usage = TokenUsage()
        self.turn_statuses.append(status)
        self.log.close_open_tools("cancelled" if status == "interrupted" else "failed")
