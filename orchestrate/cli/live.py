"""The live view of a run on a terminal (``rich.live``).

At the bottom of the screen, redrawn in place: one line per tool call in flight (a spinner, what it
does, its state and how long it has taken), the line of text being streamed, and a status line (what
the agent is doing, elapsed time, tokens and cost so far; "waiting for approval", "retrying (attempt
2 of 10, in 5.0 s)").  Above it, what is finished scrolls by as the plain renderer would print it:
text line by line, each tool call once, when it settles, with its folded output or coloured diff.

The region is redrawn by :meth:`LiveView.tick`, a task in the run's event loop, never by a thread:
the entries it draws are only touched in that loop, and holding the view still is a flag.  The
approval prompt writes to the terminal itself; :class:`ViewPrompt` holds the view (the region
cleared, nothing printed, output kept back) for as long as a question is open, so the two never
draw over each other.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import anyio
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from ..entries import EntryPatch, NormalizedEntry, ToolUseEntry
from .render import SETTLED, TextRenderer, retry_summary, status_text, tool_details, tool_head
from .view_prompt import ViewPrompt  # defined apart, without rich (see there); still found here

__all__ = ["LiveView", "ViewPrompt"]

_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_TICK = 0.1  # seconds between redraws: a spinner that moves, a clock that counts
_MAX_HELD = 2000  # finished lines kept back while a question is open; more are counted, not kept
_DOING = {"thinking": "thinking", "assistant_message": "writing"}


class LiveView(TextRenderer):
    """A :class:`TextRenderer` whose unfinished part lives in a region redrawn in place.

    Use as a context manager around the run (it starts and clears the region), with :meth:`tick`
    running beside it."""

    def __init__(
        self,
        console: Console,
        verbose: bool = False,
        clock: Callable[[], float] = time.monotonic,
        window: int | None = None,
    ) -> None:
        super().__init__(console, verbose, window)
        self._clock = clock
        self._began = clock()
        self._live: Live | None = None
        self._running = False
        self._holds = 0
        self._held: list[RenderableType] = []
        self._dropped = 0
        self._tail: Text | None = None  # the streamed line not finished yet
        self._active: dict[int, tuple[NormalizedEntry, ToolUseEntry]] = {}
        self._since: dict[int, float] = {}
        self._doing = "starting"
        self._retry: str | None = None

    # --- lifetime -------------------------------------------------------------------------------

    def __enter__(self) -> LiveView:
        self._running = True
        self._show()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.finish()
        self._running = False
        self._hide()
        self._flush_held()

    async def tick(self) -> None:
        """Redraw the region every :data:`_TICK` seconds, so the spinner and the clocks move."""
        while True:
            await anyio.sleep(_TICK)
            self.refresh()

    def refresh(self) -> None:
        if self._live is not None:
            try:
                self._live.refresh()
            except OSError:  # the terminal is gone: stop drawing, let the run end its own way
                self._live = None

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the view still: the region cleared, finished lines kept back until the end."""
        self._holds += 1
        if self._holds == 1:
            self._hide()
        try:
            yield
        finally:
            self._holds -= 1
            if self._holds == 0 and self._running:
                self._flush_held()
                self._show()

    @contextlib.contextmanager
    def between_turns(self) -> Iterator[None]:
        """A conversation's turn is over and the person types the next message: what the turn
        printed is finished, the region cleared while they type, and the clock starts again."""
        self.finish()
        with self.hold():
            yield
            self._began = self._clock()
            self._doing = "waiting for the model"
            self._retry = None

    def note(self, message: str) -> None:
        """A message of the CLI's own (Ctrl-C: interrupting), shown above the region."""
        self.emit(Text(message, style="yellow"))

    def _show(self) -> None:
        if self._live is None and self._holds == 0:
            self._live = Live(
                console=self.console,
                get_renderable=self.region,
                auto_refresh=False,  # tick() redraws, from the event loop
                transient=True,
                redirect_stdout=False,  # nothing else writes to our stdout; stderr is the CLI's
                redirect_stderr=False,
            )
            with contextlib.suppress(OSError):
                self._live.start(refresh=True)

    def _hide(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            with contextlib.suppress(OSError):
                live.stop()

    def _flush_held(self) -> None:
        held, self._held = self._held, []
        if self._dropped:
            held.append(Text(f"… {self._dropped} more lines came while the question was open", style="dim"))
            self._dropped = 0
        if held:
            self.console.print(Group(*held))

    # --- what the renderer prints ---------------------------------------------------------------

    def on_patch(self, patch: EntryPatch) -> None:
        entry = patch.entry
        kind = entry.type.kind
        if (retry := retry_summary(entry)) is not None:
            self._retry = retry  # the status line says it; the error that ends the retries is printed
        else:
            if kind not in ("system_message", "token_usage"):
                self._retry = None
            if self._doing == "starting" and kind in ("user_message", "system_message"):
                self._doing = "waiting for the model"  # the agent is up; what it waits on is the model
            self._doing = _DOING.get(kind, self._doing)
            super().on_patch(patch)
        # Now, not at the next tick; and a line printed above redraws the region as last drawn.
        self.refresh()

    def emit(self, *lines: RenderableType) -> None:
        if not lines:
            return
        if self._holds:
            room = _MAX_HELD - len(self._held)
            self._held += lines[:room]
            self._dropped += max(0, len(lines) - room)
            return
        self.console.print(Group(*lines))

    def _stream_text(self, fresh: Text, label: Text | None) -> None:
        if label is not None:
            self._tail = label + Text(" ")
        if self._tail is None:
            self._tail = Text()
        self._tail.append_text(fresh)
        # Whole lines go above; the line still growing stays in the region, at most a row long.
        while "\n" in self._tail.plain:
            line, rest = self._tail.divide([self._tail.plain.index("\n")])
            self.emit(line)
            self._tail = rest[1:]
        width = max(20, self.console.width)
        while self._tail.cell_len > width:
            cut = self._tail.plain.rfind(" ", 0, width) + 1 or width
            row, self._tail = self._tail.divide([cut])
            self.emit(row)

    def _end_text(self) -> None:
        tail, self._tail = self._tail, None
        if tail is not None and tail.plain:
            self.emit(tail)

    def _tool(self, entry: NormalizedEntry, tool: ToolUseEntry) -> None:
        index = entry.index
        since = self._since.setdefault(index, self._clock())
        if self._tool_state.get(index) == tool.status:
            if index in self._active:
                self._active[index] = (entry, tool)  # its input may still be growing
            return
        if index not in self._tool_state:
            self._close_line()  # the text before it is finished
            self._flush_noise()
        self._tool_state[index] = tool.status
        if tool.status not in SETTLED:
            self._active[index] = (entry, tool)
            self._doing = f"running {tool_head(entry, tool, False).plain[2:]}"
            return
        self._active.pop(index, None)
        self._close_line()
        self._flush_noise()
        line = tool_head(entry, tool, self.verbose).append(" ").append_text(status_text(tool.status))
        line.append(f" {_duration(self._clock() - since)}", style="dim")
        self.emit(line, *tool_details(tool, self.verbose))
        self._doing = "waiting for the model"

    def _forget(self, below: int) -> None:
        super()._forget(below)
        for index in [i for i in self._since if i < below and i not in self._active]:
            del self._since[index]

    def _block(self, entry: NormalizedEntry) -> None:
        if entry.type.kind == "token_usage":
            self._doing = "turn finished"
        super()._block(entry)

    # --- the region -----------------------------------------------------------------------------

    def region(self) -> RenderableType:
        now = self._clock()
        frame = _FRAMES[int(now / _TICK) % len(_FRAMES)]
        rows: list[RenderableType] = []
        waiting = None
        for index, (entry, tool) in self._active.items():
            line = Text.assemble((frame + " ", "cyan"), tool_head(entry, tool, self.verbose))
            state = "starting" if tool.status == "created" else tool.status
            line.append(" ").append_text(status_text(state))
            line.append(f" {_duration(now - self._since.get(index, now))}", style="dim")
            rows.append(_one_row(line))
            if tool.status == "pending_approval":
                waiting = f"waiting for approval: {tool_head(entry, tool, False).plain[2:]}"
        if self._tail is not None and self._tail.plain:
            rows.append(_one_row(self._tail.copy()))
        doing = waiting or self._retry or self._doing
        alert = "yellow" if waiting or self._retry else ""
        status = Text.assemble((frame + " ", "cyan"), (doing, alert))
        status.append(f" · {_duration(now - self._began)}", style="dim")
        if (usage := self.usage) is not None:
            tokens = usage.input_tokens + usage.output_tokens
            status.append(f" · {_count(tokens)} tokens", style="dim")
            if usage.total_cost_usd is not None:
                status.append(f" · ${usage.total_cost_usd:.4f}", style="dim")
        rows.append(_one_row(status))
        return Group(*rows)


def _one_row(text: Text) -> Text:
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    return f"{int(seconds // 60)}m {int(seconds % 60):02d}s"


def _count(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)
