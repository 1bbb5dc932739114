"""What a person is shown before approving a tool call: what would run or change, escaped and bounded.

Everything here comes from the agent (and so, through the model, from whatever it read), so it is
text to show, never to send: control characters (ESC, CR, BEL, ...), bidi overrides and other
invisible format characters are written as escapes, so a command cannot retitle the window, clear
the screen, move the cursor over the question or hide part of itself.  Long content is cut with a
note saying how much was left out.
"""

from __future__ import annotations

import difflib
import json
import unicodedata
from typing import Any

from .base import ApprovalRequest

__all__ = ["block", "escape", "question_lines"]

MAX_LINES = 40  # of a command, a file's content or a diff
MAX_COLUMNS = 240  # of one shown line
_TAIL_LINES = 5  # of a cut command, shown after the cut
_GUTTER = "  │ "
# Categories written as escapes: controls, format characters (bidi overrides, zero-width ones),
# surrogates, private use, unassigned, and the line and paragraph separators.
_HIDDEN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def escape(text: str) -> str:
    """``text`` with every character that could act on a terminal written as a Python-style escape
    (``\\x1b``, ``\\r``, ``\\n``, ``\\u202e``); tabs kept."""
    out = []
    for char in text:
        if char == "\t":
            out.append(char)
        elif unicodedata.category(char) in _HIDDEN:
            out.append(_escaped(ord(char)))
        else:
            out.append(char)
    return "".join(out)


def _escaped(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def question_lines(request: ApprovalRequest) -> list[str]:
    """The question for ``request``: a headline, then what exactly would run or change."""
    args = request.tool_input if isinstance(request.tool_input, dict) else {}
    name = escape(request.tool_name)
    lines: list[str]
    if request.command:
        lines = [f"? {name} wants to run:", *block(request.command, tail=_TAIL_LINES)]
    elif _has_change(args):
        where = ", ".join(escape(p) for p in request.paths) or escape(str(args.get("file_path", "")))
        lines = [f"? {name} wants to change {where or 'a file'}:", *_change(args)]
    elif request.paths:
        lines = [f"? {name} wants to use {', '.join(escape(p) for p in request.paths)}"]
    else:
        raw = json.dumps(request.tool_input, ensure_ascii=False, default=str)
        lines = [f"? {name} wants to run with:", *block(raw)]
    if request.context and request.context != request.command:
        lines.append(f"  why: {_cut(escape(request.context))}")
    if request.cwd:
        lines.append(f"  in: {_cut(escape(request.cwd))}")
    return lines


def _has_change(args: dict[str, Any]) -> bool:
    return any(k in args for k in ("content", "new_string", "edits", "changes", "newText"))


def _change(args: dict[str, Any]) -> list[str]:
    """A new file's content, or the edit as a unified diff."""
    if isinstance(args.get("changes"), list):  # Codex: [{path, kind, diff}]
        diffs = [c.get("diff") for c in args["changes"] if isinstance(c, dict)]
        return block("\n".join(d for d in diffs if isinstance(d, str)) or "(no diff given)")
    if isinstance(args.get("edits"), list):  # MultiEdit: [{old_string, new_string}]
        pairs = [(e.get("old_string"), e.get("new_string")) for e in args["edits"] if isinstance(e, dict)]
        return block("\n".join(_diff(old, new) for old, new in pairs))
    if "new_string" in args or "newText" in args:
        old = args.get("old_string", args.get("oldText"))
        return block(_diff(old, args.get("new_string", args.get("newText"))))
    content = args.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
    return ["  content:", *block(text)]


def _diff(old: Any, new: Any) -> str:
    before = old.splitlines() if isinstance(old, str) else []
    after = new.splitlines() if isinstance(new, str) else []
    return "\n".join(difflib.unified_diff(before, after, "before", "after", lineterm="", n=2))


def block(text: str, tail: int = 0) -> list[str]:
    """``text`` as gutter-marked lines (so no line of it can pass for our own), at most MAX_LINES;
    ``tail``: that many of the last lines are shown after the cut (a command's end is what runs
    last: padding must not push it out of sight)."""
    lines = text.split("\n")
    if len(lines) <= MAX_LINES:
        return [_GUTTER + _cut(escape(line)) for line in lines]
    head, rest, end = (
        lines[: MAX_LINES - tail],
        lines[MAX_LINES - tail : len(lines) - tail],
        lines[len(lines) - tail :],
    )
    size = sum(len(line) + 1 for line in rest)
    note = f"{_GUTTER}… {len(rest)} more lines ({size} characters) not shown"
    return [
        *(_GUTTER + _cut(escape(line)) for line in head),
        note,
        *(_GUTTER + _cut(escape(line)) for line in end),
    ]


def _cut(line: str) -> str:
    """A long line's start and its end, with what is left out between said: the end of a line is
    what a padded command hides."""
    if len(line) <= MAX_COLUMNS:
        return line
    end = MAX_COLUMNS // 4
    return f"{line[: MAX_COLUMNS - end]} … ({len(line) - MAX_COLUMNS} more) … {line[-end:]}"
