"""What an agent's text UI means, per agent: where its input is, what is chrome, how it asks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["TuiRules"]


@dataclass(frozen=True)
class TuiRules:
    """Regexes over screen lines (after trailing blanks are cut) and the keys that answer.

    ``chrome`` lines are never text: input boxes, status bars, hints, borders.  ``ready`` tells the
    UI takes input.  ``permission`` finds a permission question on the screen; its named group
    ``what`` (if any) is what would run, ``tool`` (if any) the tool that asks.  Keys are sent as
    written (``\\r`` is Enter)."""

    name: str
    ready: re.Pattern[str]
    chrome: tuple[re.Pattern[str], ...] = ()
    permission: re.Pattern[str] | None = None
    approve_keys: str = "y"
    deny_keys: str = "n"
    interrupt_keys: str = "\x1b"
    exit_keys: str = "\x04"
    busy: re.Pattern[str] | None = None
    submit_keys: str = "\r"
    prompt_prefix: tuple[str, ...] = field(default=("> ",))
    bullet: re.Pattern[str] | None = None  # the mark before each message (with its indent), left out

    def is_chrome(self, line: str) -> bool:
        return any(p.search(line) for p in self.chrome)

    def unmarked(self, line: str) -> str:
        """``line`` without the mark the UI puts before a message, if it has one."""
        return line if self.bullet is None else self.bullet.sub("", line, count=1)
