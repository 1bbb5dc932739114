"""Unified diffs for file changes, from whatever form the agent reported them in."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["diff_from_hunks", "diff_texts"]


def diff_texts(path: str, old: str, new: str, *, created: bool = False) -> str:
    """A unified diff turning ``old`` into ``new`` (``/dev/null`` as the old side of a new file)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile="/dev/null" if created else f"a/{path.lstrip('/')}",
        tofile=f"b/{path.lstrip('/')}",
    )
    return "".join(_terminate(lines))


def diff_from_hunks(path: str, hunks: Iterable[Mapping[str, Any]]) -> str | None:
    """A unified diff from Claude's ``structuredPatch`` hunks (oldStart, oldLines, newStart, newLines,
    lines with their ``+``/``-``/`` `` prefix).  None when the hunks are not in that shape."""
    out = [f"--- a/{path.lstrip('/')}\n", f"+++ b/{path.lstrip('/')}\n"]
    try:
        for h in hunks:
            old = f"-{int(h['oldStart'])},{int(h['oldLines'])}"
            new = f"+{int(h['newStart'])},{int(h['newLines'])}"
            out.append(f"@@ {old} {new} @@\n")
            out.extend(_terminate(str(line) for line in h["lines"]))
    except (KeyError, TypeError, ValueError):
        return None
    return "".join(out) if len(out) > 2 else None


def _terminate(lines: Iterable[str]) -> Iterable[str]:
    # difflib leaves a last line without newline unterminated; the diff must still be line-based.
    for line in lines:
        yield line if line.endswith("\n") else line + "\n"
