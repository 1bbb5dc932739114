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
    written (``\\r`` is Enter).

    A question counts only where the UI itself asks it (see :meth:`question`), never where the
    model merely printed one: ``dialog`` is the line that opens the UI's own area at the bottom of
    the screen (questions are looked for below the last one); ``menu`` matches the lines of the
    question's menu, and then nothing else may follow the question and ``menu_cursor`` (the
    selection mark) must be on one of them; ``input_line`` is the UI's input box, which is not on
    the screen while the UI waits for an answer."""

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
    dialog: re.Pattern[str] | None = None
    menu: re.Pattern[str] | None = None
    menu_cursor: re.Pattern[str] | None = None
    input_line: re.Pattern[str] | None = None

    def is_chrome(self, line: str) -> bool:
        return any(p.search(line) for p in self.chrome)

    def question(self, screen: str) -> re.Match[str] | None:
        """The permission question the UI is asking on ``screen``, or None.

        The bottom-most match, in the UI's own area, anchored to its menu: below it only menu lines
        (or, for a UI with no menu rule, chrome other than the input box).  Text the model printed
        above (a fake "Do you want to proceed? 1. Yes" in its answer) cannot decide anything: it
        is not the last question, or has the answer's text or the input box below it."""
        if self.permission is None:
            return None
        region = screen
        opens = list(self.dialog.finditer(screen)) if self.dialog is not None else []
        if opens:  # else scrolled off: the anchoring below still tells the UI's question from text
            region = screen[opens[-1].end() :]
        matches = list(self.permission.finditer(region))
        if not matches or not self._anchored(region[matches[-1].end() :]):
            return None
        return matches[-1]

    def _anchored(self, below: str) -> bool:
        lines = below.split("\n")
        if lines[0].strip():
            return False  # the question's own line goes on: it is quoted in running text
        rest = [line for line in lines[1:] if line.strip()]
        if self.menu is not None:
            cursor = self.menu_cursor
            on_menu = cursor is None or any(cursor.search(line) for line in rest)
            return on_menu and all(self.menu.search(line) for line in rest)
        input_box = self.input_line
        return all(
            self.is_chrome(line) and not (input_box is not None and input_box.search(line)) for line in rest
        )

    def unmarked(self, line: str) -> str:
        """``line`` without the mark the UI puts before a message, if it has one."""
        return line if self.bullet is None else self.bullet.sub("", line, count=1)
