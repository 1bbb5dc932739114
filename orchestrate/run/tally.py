"""What a run's result says of all its entries, folded one entry at a time.

Each entry is seen once, in its last state: a streaming run (``Run(..., streaming=True)``) hands
each entry over as its normalizer lets it go (an entry let go of never changes again), and the ones
still kept at the end; a run that keeps every entry hands them all over at the end.  Either way
the figures are the same, and no list of entries is needed to make them.  Entries come in index
order, except tool calls held open past the window, which come when they close (nothing here
depends on where those fall).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..entries import NormalizedEntry, TokenUsage

if TYPE_CHECKING:  # its patterns are compiled at the first error, not before the first entry
    from .failure import Failure, FailureWatch

__all__ = ["EntryTally", "UsageSum", "is_reported"]


def is_reported(usage: TokenUsage) -> bool:
    """Whether ``usage`` says anything.  An agent that reports no usage still ends its turns (the ACP
    normalizer writes a usage entry per turn, zero when the agent sent none): all zeros and no cost
    is that, not a report, and is shown as "not reported" rather than ``0 in, 0 out``."""
    counts = (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
    return any(counts) or usage.total_cost_usd is not None


class UsageSum:
    """Token usage entries added up: counts summed, costs summed (None when none had one; added in
    entry order, as ``sum`` adds a list), the context window the last one that named it.  The run's
    result sums its entries with it, and the text and live views what they show (cli/render.py)."""

    __slots__ = ("cache_read", "cache_write", "cost", "input", "output", "seen", "window")

    def __init__(self) -> None:
        self.input = self.output = self.cache_read = self.cache_write = 0
        self.cost: float | None = None
        self.window: int | None = None
        self.seen = False

    def copy(self) -> UsageSum:
        other = UsageSum()
        for name in self.__slots__:
            setattr(other, name, getattr(self, name))
        return other

    def add(self, usage: TokenUsage) -> None:
        self.seen = True
        self.input += usage.input_tokens
        self.output += usage.output_tokens
        self.cache_read += usage.cache_read_tokens
        self.cache_write += usage.cache_write_tokens
        if usage.total_cost_usd is not None:
            self.cost = (self.cost if self.cost is not None else 0) + usage.total_cost_usd
        self.window = usage.context_window or self.window

    def total(self) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input,
            output_tokens=self.output,
            cache_read_tokens=self.cache_read,
            cache_write_tokens=self.cache_write,
            total_cost_usd=self.cost,
            context_window=self.window,
        )


class EntryTally:
    """The figures of a run's result, folded from its entries (see the module's docstring)."""

    __slots__ = ("_all", "_reported", "approvals_timed_out", "count", "error", "failures", "resume_failed")

    def __init__(self) -> None:
        self.count = 0
        """Entries the run made (one more than the highest index seen)."""
        self.error: str | None = None
        """The last error entry's message."""
        self.resume_failed = False
        """Whether an error said the session to resume was not found."""
        self.approvals_timed_out = 0
        """Tool calls whose approval timed out."""
        self.failures: FailureWatch | None = None  # (made at the first error)
        self._all = UsageSum()
        self._reported = UsageSum()

    def see(self, entry: NormalizedEntry) -> None:
        if entry.index >= self.count:
            self.count = entry.index + 1
        # By the entry's kind (its discriminator): an isinstance check against a model class goes
        # through pydantic's metaclass, 0.3 us an entry.
        t = entry.type
        if t.kind == "tool_use":
            approval = t.tool.approval
            if approval is not None and approval.decision == "timed_out":
                self.approvals_timed_out += 1
        elif t.kind == "token_usage":
            usage = t.usage
            self._all.add(usage)
            if is_reported(usage):
                self._reported.add(usage)
        elif t.kind == "error":
            error = t.error
            self.error = error.message
            self.resume_failed = self.resume_failed or error.code == "resume_failed"
            if self.failures is None:
                from .failure import FailureWatch

                self.failures = FailureWatch()
            self.failures.see(entry)

    def token_usage(self) -> TokenUsage:
        """Every usage entry added up (zeros when there was none)."""
        return self._all.total()

    def reported_usage(self) -> TokenUsage | None:
        """The usage the agent reported, all turns together (turns that said nothing left out, see
        :func:`is_reported`); None if it reported none."""
        return self._reported.total() if self._reported.seen else None

    def failure(self, outcome: str, stderr_tail: str) -> Failure | None:
        """Why the run failed, when the agent's words say (:class:`FailureWatch`)."""
        if outcome == "success":
            return None
        if self.failures is None:
            from .failure import FailureWatch

            self.failures = FailureWatch()
        return self.failures.failure(outcome, stderr_tail)
