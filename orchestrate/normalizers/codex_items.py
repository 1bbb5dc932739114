"""What Codex's two output formats (app-server items, exec JSONL items) have in common."""

from __future__ import annotations

import functools
import shlex
from typing import Any

from ..entries import FileChange
from .diffs import diff_texts

__all__ = ["display_command", "file_change"]

_SHELL_WRAPPERS = (
    ["/bin/bash", "-lc"],
    ["bash", "-lc"],
    ["/bin/sh", "-c"],
    ["sh", "-c"],
    ["/bin/zsh", "-lc"],
)
_QUOTED_PREFIXES = tuple(" ".join(w) + " '" for w in _SHELL_WRAPPERS)


def display_command(command: str) -> str:
    """The command the model asked for: Codex runs it as ``/bin/bash -lc '<cmd>'`` (0.169.0)."""
    # The usual form, a body in single quotes with none inside, is exactly what shlex would give
    # back (nothing is special between single quotes): no need to run the tokenizer on it.
    if command[-1:] == "'":
        for prefix in _QUOTED_PREFIXES:
            if command.startswith(prefix) and len(command) > len(prefix):
                body = command[len(prefix) : -1]
                if "'" not in body:
                    return body
                break  # (no prefix is another's start: the tokenizer decides)
    return _unwrapped(command)


@functools.lru_cache(maxsize=256)  # each item's command comes again when the item completes
def _unwrapped(command: str) -> str:
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    for wrapper in _SHELL_WRAPPERS:
        if argv[: len(wrapper)] == wrapper and len(argv) == len(wrapper) + 1:
            return argv[-1]
    return command


def file_change(path: str, kind: str, body: Any) -> FileChange:
    """One file of a patch as a unified diff.  Codex gives an added file's content, a deleted
    file's old content, and an update's hunks (with or without ``---``/``+++`` headers)."""
    text = body if isinstance(body, str) else ""
    if kind == "add":
        return FileChange(type="create", unified_diff=diff_texts(path, "", text, created=True))
    if kind == "delete":
        return FileChange(type="delete", unified_diff=diff_texts(path, text, "") if text else None)
    if text and not text.startswith(("---", "diff --git")):
        name = path.lstrip("/")
        text = f"--- a/{name}\n+++ b/{name}\n{text}"
    return FileChange(type="edit", unified_diff=text or None)
