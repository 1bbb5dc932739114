"""Path rules judge where a path really leads: normalized (``//etc`` is ``/etc``, ``src/../.env`` is
``.env``) and resolved (a symlink to ``/etc`` or to ``.env`` is judged as its target).

Deny rules look at both the path as given and the resolved one (either may match); allow rules
require both to match, so a link inside an allowed directory cannot reach outside it."""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

__all__ = ["PathForms", "path_matches"]


@dataclass(frozen=True)
class PathForms:
    """A path as given (absolute, normalized) and as the file system resolves it."""

    given: str
    resolved: str

    @classmethod
    def of(cls, path: str, cwd: str | None) -> PathForms:
        expanded = str(Path(path).expanduser()) if path.startswith("~") else path
        if not posixpath.isabs(expanded) and cwd:
            expanded = posixpath.join(cwd, expanded)
        given = normalize(expanded)
        # Resolved from the raw path: the kernel follows a symlink before the ".." after it, so
        # link/../x is not x.  A relative path would resolve against our own working directory,
        # not the run's: it stays as given.
        resolved = normalize(os.path.realpath(expanded)) if posixpath.isabs(expanded) else given
        return cls(given, resolved)

    @property
    def forms(self) -> tuple[str, ...]:
        return (self.given,) if self.given == self.resolved else (self.given, self.resolved)


def normalize(path: str) -> str:
    """Lexically normalized, with ``..`` resolved and leading ``//`` folded (POSIX leaves ``//``
    implementation-defined; on Linux and macOS it is ``/``)."""
    absolute = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not absolute:
                parts.append(part)
        elif part not in ("", "."):
            parts.append(part)
    joined = "/".join(parts)
    return "/" + joined if absolute else joined or "."


def path_matches(path: str, pattern: str, cwd: str | None) -> bool:
    """Match an absolute ``path``, and its form relative to the working directory, against a rule
    pattern (``*`` crosses ``/``; ``**/x`` also matches ``x`` at the top)."""
    candidates = [path]
    for base in _bases(cwd):
        if path == base or path.startswith(base.rstrip("/") + "/"):
            candidates.append(path[len(base.rstrip("/")) + 1 :] or ".")
    patterns = [pattern, pattern[3:]] if pattern.startswith("**/") else [pattern]
    if pattern.startswith("/"):
        patterns = [normalize(p) if "*" not in p else p for p in patterns]
    return any(fnmatchcase(c, p) for c in candidates for p in patterns)


def _bases(cwd: str | None) -> tuple[str, ...]:
    if not cwd:
        return ()
    given = normalize(cwd)
    resolved = normalize(os.path.realpath(given))
    return (given,) if given == resolved else (given, resolved)
