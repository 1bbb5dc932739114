"""Render entry patches for a person.

:class:`TextRenderer` is append-only, so it works in a pipe and a log file alike: text of the entry
being streamed is printed as it grows; a tool call gets a line when it asks or starts and one when it
settles (with its result); nothing printed is ever rewritten.  The live view for a terminal
(:mod:`.live`) builds on it and shares its pieces: tool lines, folded output, coloured diffs, noise
collapsed into one quiet line, the retry notice.

Everything shown that came from the agent is printed as text, never as markup: a tool's output that
says ``[red]`` shows ``[red]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from rich.console import Console, RenderableType
from rich.text import Text

from ..entries import (
    CommandRun,
    EntryPatch,
    ErrorEntry,
    FileEdit,
    FileWrite,
    NormalizedEntry,
    Plan,
    PlanItem,
    TokenUsage,
    TokenUsageEntry,
    ToolUse,
    ToolUseEntry,
)
from ..run.tally import UsageSum, is_reported  # (one definition each: the run's result's too)
from .names import display_name

__all__ = [
    "SETTLED",
    "TextRenderer",
    "fold",
    "noise_summary",
    "retry_summary",
    "tool_details",
    "tool_head",
    "usage_summary",
]

_STREAMED = ("assistant_message", "thinking")
SETTLED = ("success", "failed", "denied", "timed_out", "cancelled")
STATUS_STYLE = {
    "success": "green",
    "failed": "red",
    "denied": "yellow",
    "timed_out": "yellow",
    "cancelled": "yellow",
    "pending_approval": "magenta",
}
MAX_OUTPUT_LINES = 12
"""Lines of a tool's output or diff shown before the rest is folded (``--verbose`` shows it all)."""

_PLAN_MARKS = {"completed": "☒", "in_progress": "◐", "pending": "☐", "cancelled": "☓"}
_GENERIC = re.compile(r"^`[^`]*` (notification|update|message|event)$")
_MODE = ("Mode: ", "Mode set to ", "Permission mode: ", "Permission mode set to ")


# --- pieces shared with the live view ---------------------------------------------------------


def tool_head(entry: NormalizedEntry, tool: ToolUseEntry, verbose: bool) -> Text:
    """``⏺ Shell `ls -la``` : what the tool does and on what, without its status."""
    name = display_name(tool, verbose)
    head = Text.assemble(("⏺ ", "bold blue"), (name, "bold blue"))
    # A generic tool's content is its own name: said once is enough.
    if entry.content and entry.content != tool.tool_name:
        head.append(" " + entry.content.replace("\n", " "))
    return head


def status_text(status: str) -> Text:
    return Text(status.replace("_", " "), style=STATUS_STYLE.get(status, "blue"))


def tool_details(tool: ToolUseEntry, verbose: bool) -> list[Text]:
    """What a settled tool call shows under its line: why it was refused, its output (folded), the
    diff of what it changed (coloured), a failing exit code, its error."""
    action = tool.action
    lines: list[Text] = []
    if tool.approval and tool.approval.reason:
        lines.append(Text.assemble(("  reason: ", "yellow"), tool.approval.reason))
    if isinstance(action, CommandRun) and action.result is not None:
        out = (action.result.stdout or "") + (action.result.stderr or "")
        lines += fold(out, verbose)
        if action.result.exit_code not in (None, 0):
            lines.append(Text(f"  exit code {action.result.exit_code}", style="red"))
    elif isinstance(action, FileWrite | FileEdit) and tool.status == "success":
        for change in action.changes:
            lines += fold(change.unified_diff or "", verbose, diff=True)
    elif tool.result is not None and tool.result.error and tool.status == "failed":
        lines += fold(tool.result.error, verbose)
    return lines


def fold(text: str, verbose: bool, diff: bool = False) -> list[Text]:
    """``text`` indented under its tool; past :data:`MAX_OUTPUT_LINES` lines folded into a count,
    unless ``verbose``.  A diff's lines are coloured as a diff."""
    lines = text.rstrip("\n").splitlines()
    shown = lines if verbose else lines[:MAX_OUTPUT_LINES]
    out = [Text.assemble(("  │ ", "dim"), (line, _diff_style(line) if diff else "dim")) for line in shown]
    if len(lines) > len(shown):
        out.append(Text(f"  │ … {len(lines) - len(shown)} more lines (--verbose shows them)", style="dim"))
    return out


def _diff_style(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "bold"
    if line.startswith("+"):
        return "green"
    if line.startswith("-"):
        return "red"
    if line.startswith("@@"):
        return "cyan"
    return "dim"


def noise_summary(entry: NormalizedEntry) -> str | None:
    """The short form of a system message that is noise (the agent's command list, a mode or
    configuration change, an unknown notification); None for one worth its own line."""
    if entry.type.kind != "system_message":
        return None
    extra = entry.metadata.extra if entry.metadata and entry.metadata.extra else {}
    commands = extra.get("commands")
    if isinstance(commands, list):
        return f"{len(commands)} commands available"
    content = entry.content
    for prefix in _MODE:
        if content.startswith(prefix):
            return "mode " + content[len(prefix) :].strip()
    if content == "Context usage updated" or "usage" in extra:
        return "context usage updated"
    if _GENERIC.match(content):
        return content.replace("`", "")
    return None


def retry_summary(entry: NormalizedEntry) -> str | None:
    """``retrying (attempt 2 of 10, in 0.5 s): API error 529`` for an agent's retry notice; else None."""
    t = entry.type
    if not isinstance(t, ErrorEntry) or t.error.code != "api_retry":
        return None
    extra = entry.metadata.extra if entry.metadata and entry.metadata.extra else {}
    raw = extra.get("raw")
    if isinstance(raw, dict) and raw.get("attempt") is not None:  # Claude's system/api_retry
        of = f" of {raw['max_retries']}" if raw.get("max_retries") is not None else ""
        delay = raw.get("retry_delay_ms")
        wait = f", in {delay / 1000:.1f} s" if isinstance(delay, int | float) else ""
        status = raw.get("error_status")
        why = f"API error {status}" if status is not None else str(raw.get("error") or "no answer")
        return f"retrying (attempt {raw['attempt']}{of}{wait}): {why}"
    return f"retrying: {t.error.message}"


def usage_summary(usage: TokenUsage | None) -> str:
    if usage is None:
        return "tokens: not reported"
    cost = f", ${usage.total_cost_usd:.4f}" if usage.total_cost_usd is not None else ""
    return f"tokens: {usage.input_tokens} in, {usage.output_tokens} out{cost}"


# --- the append-only renderer -------------------------------------------------------------------


class TextRenderer:
    """Prints each entry as it comes.  ``verbose``: whole outputs, the agent's own tool names, and
    every system message on its own line instead of the noise folded into one.

    ``window``: the patches come from a streaming run or replay whose normalizer keeps that many
    entries (``Run(..., streaming=True)``): no patch comes for an entry that far behind the newest
    but for a tool call still open, so what the view remembers of older entries is let go of
    (their text as printed, their tool states, plans and usage), and its memory stays flat in the
    number of entries as the run's does.  None: it remembers every entry (patches of any source)."""

    def __init__(self, console: Console, verbose: bool = False, window: int | None = None) -> None:
        self.console = console
        self.verbose = verbose
        self.window = window
        self._newest = -1  # the highest index seen
        self._kept_from = 0  # what is remembered of entries below this index was let go of
        self._usage_before = UsageSum()  # the usage of entries let go of, added up
        self._noise_before: dict[str, None] = {}  # the noise of entries let go of, not shown yet
        self._printed: dict[int, str] = {}  # streamed entry -> its text as printed so far
        self._open: int | None = None  # the entry whose text is mid-line
        self._tool_state: dict[int, str] = {}
        self._plans: dict[int, tuple[PlanItem, ...]] = {}
        self._noise: dict[int, str] = {}  # noise not yet shown, by entry (a later version replaces)
        self._usage: dict[int, TokenUsage] = {}

    def on_patch(self, patch: EntryPatch) -> None:
        entry = patch.entry
        if entry.index > self._newest:
            self._newest = entry.index
            # Once per ``window`` new entries, not per patch: linear however long the run.
            if self.window is not None and self._newest - self._kept_from >= 2 * self.window:
                self._forget(self._newest - self.window)
        t = entry.type
        if t.kind in _STREAMED:
            self._stream(entry)
        elif isinstance(t, ToolUse):
            self._tool(entry, t.tool)
        elif isinstance(t, Plan):
            # A plan streams in (first empty, then whole) and is updated later: show each new version.
            if t.items and self._plans.get(entry.index) != t.items:
                self._plans[entry.index] = t.items
                self._close_line()
                self._block(entry)
        elif isinstance(t, TokenUsageEntry):
            if is_reported(t.usage):
                self._usage[entry.index] = t.usage
            if patch.op == "add":
                self._close_line()
                self._block(entry)
        elif (noise := noise_summary(entry)) is not None and not self.verbose:
            self._noise[entry.index] = noise  # shown folded, before whatever comes next
        elif patch.op == "add":
            self._close_line()
            self._block(entry)

    def finish(self) -> None:
        self._close_line()
        self._flush_noise()

    @property
    def usage(self) -> TokenUsage | None:
        """Tokens and cost reported so far, all turns together."""
        total = self._usage_before.copy()
        for usage in self._usage.values():
            total.add(usage)
        return total.total() if total.seen else None

    def _forget(self, below: int) -> None:
        """Let go of what is remembered of the entries below index ``below`` (see ``window``): no
        patch will come for them, but for tool calls still open, whose state is kept."""
        self._kept_from = below
        for index in [i for i in self._printed if i < below]:
            del self._printed[index]
        for index in [i for i in self._plans if i < below]:
            del self._plans[index]
        # Noise waiting to be shown: each different text once (as it will be shown), and the older
        # entries' first, as their places in the line are (entries are added in index order).
        for index in [i for i in self._noise if i < below]:
            self._noise_before[self._noise.pop(index)] = None
        for index in [i for i in self._usage if i < below]:
            self._usage_before.add(self._usage.pop(index))
        for index in [i for i, state in self._tool_state.items() if i < below and state in SETTLED]:
            del self._tool_state[index]

    # --- output: the live view overrides these -----------------------------------------------

    def emit(self, *lines: RenderableType) -> None:
        """Print finished lines, which stay as they are."""
        for line in lines:  # soft wrap: a pipe gets lines as long as they are, not cut at 80
            self.console.print(line, soft_wrap=True)

    def _stream_text(self, fresh: Text, label: Text | None) -> None:
        if label is not None:
            self.console.print(label, end=" ")
        self.console.print(fresh, end="", soft_wrap=True)

    def _end_text(self) -> None:
        self.console.print()

    # --- entries ------------------------------------------------------------------------------

    def _stream(self, entry: NormalizedEntry) -> None:
        printed = self._printed.get(entry.index)
        label = None
        if self._open != entry.index:
            self._close_line()
            self._flush_noise()
            if printed is None:
                label = Text("thinking" if entry.type.kind == "thinking" else "assistant", style="bold cyan")
            self._open = entry.index
        printed = printed or ""
        text = entry.content
        # Deltas only ever extend the text; if the agent rewrote it, print the new version whole.
        fresh = text[len(printed) :] if text.startswith(printed) else "\n" + text
        style = "dim italic" if entry.type.kind == "thinking" else ""
        self._printed[entry.index] = text
        if fresh or label is not None:
            self._stream_text(Text(fresh, style=style), label)

    def _close_line(self) -> None:
        if self._open is not None:
            self._end_text()
            self._open = None

    def _flush_noise(self) -> None:
        if self._noise or self._noise_before:
            shown = " · ".join(self._noise_before | dict.fromkeys(self._noise.values()))
            self._noise.clear()
            self._noise_before = {}
            self.emit(Text("· " + shown, style="dim"))

    def _tool(self, entry: NormalizedEntry, tool: ToolUseEntry) -> None:
        previous = self._tool_state.get(entry.index)
        # "created" is not shown: its input may still be streaming in; the next status shows it whole.
        if previous == tool.status or tool.status == "created":
            return
        self._close_line()
        self._flush_noise()
        self._tool_state[entry.index] = tool.status
        line = tool_head(entry, tool, self.verbose)
        line.append(" ").append_text(status_text(tool.status))
        self.emit(line)
        if tool.status in SETTLED:
            self.emit(*tool_details(tool, self.verbose))

    def _block(self, entry: NormalizedEntry) -> None:
        self._flush_noise()
        self.emit(*self._block_lines(entry))

    def _block_lines(self, entry: NormalizedEntry) -> Iterator[Text]:
        t = entry.type
        if (retry := retry_summary(entry)) is not None:
            yield Text(retry, style="yellow")
        elif isinstance(t, ErrorEntry):
            code = f" ({t.error.code})" if t.error.code else ""
            yield Text.assemble((f"error{code}", "bold red"), " ", t.error.message)
        elif isinstance(t, TokenUsageEntry):
            if is_reported(t.usage):  # a turn's end with no usage in it is not worth a line
                yield Text(usage_summary(t.usage), style="dim")
        elif isinstance(t, Plan):
            yield Text("plan", style="bold")
            for item in t.items:
                yield Text(f"  {_PLAN_MARKS[item.status]} {item.content}")
        elif t.kind == "user_message":
            yield Text.assemble(("user", "bold green"), " ", entry.content)
        else:
            yield Text(entry.content, style="dim")
