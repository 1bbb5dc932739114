"""Unified diffs for file changes, from whatever form the agent reported them in."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["diff_from_hunks", "diff_texts"]


_CACHED_CHARS = 64 * 1024
"""Diffs of texts up to this size (old and new together) are remembered, a few of them: agents
report the same edit when it starts and again when it completes, and difflib is the costliest
step of either line."""


def diff_texts(path: str, old: str, new: str, *, created: bool = False) -> str:
    """A unified diff turning ``old`` into ``new`` (``/dev/null`` as the old side of a new file)."""
    fromfile = "/dev/null" if created else f"a/{path.lstrip('/')}"
    tofile = f"b/{path.lstrip('/')}"
    if not old or not new:
        return _one_sided(fromfile, tofile, old, new)  # a new or emptied file: no matching to do
    if len(old) + len(new) <= _CACHED_CHARS:
        return _cached_diff(fromfile, tofile, old, new)
    return _diff(fromfile, tofile, old, new)


def _diff(fromfile: str, tofile: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=fromfile, tofile=tofile
    )
    return "".join(_terminate(lines))


_cached_diff = functools.lru_cache(maxsize=16)(_diff)


def _one_sided(fromfile: str, tofile: str, old: str, new: str) -> str:
    """What difflib gives when one side is empty: one hunk adding (or removing) every line."""
    lines = (new or old).splitlines(keepends=True)
    if not lines:
        return ""
    n = len(lines)
    span = "1" if n == 1 else f"1,{n}"
    ranges = f"-0,0 +{span}" if new else f"-{span} +0,0"
    sign = "+" if new else "-"
    body = "".join(sign + (line if line.endswith("\n") else line + "\n") for line in lines)
    return f"--- {fromfile}\n+++ {tofile}\n@@ {ranges} @@\n{body}"


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
