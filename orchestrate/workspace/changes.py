"""What changed in a workspace, as unified diffs per file (for a board's review pane), and a way to
take the changes out: a commit on the task's branch."""

from __future__ import annotations

import contextlib
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .checkpoints import resolve
from .git import GitError, GitRepo, run_git
from .model import Workspace, WorkspaceError
from .snapshot import commit_tree, private_index, snapshot_tree

__all__ = ["MAX_FILE_DIFF", "FileChange", "commit_changes", "diff", "task_changes"]

MAX_FILE_DIFF = 1024 * 1024
"""Characters of one file's diff kept (the rest is cut, and the change says so)."""
MAX_DIFF_OUTPUT = 64 * 1024 * 1024
_STATUS: dict[str, Literal["added", "modified", "deleted", "type_changed"]] = {
    "A": "added",
    "M": "modified",
    "D": "deleted",
    "T": "type_changed",
}


class FileChange(BaseModel):
    """One file's change between two snapshots; ``diff`` is its unified diff (git's format, paths
    prefixed ``a/`` and ``b/``); a binary file has none."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    status: Literal["added", "modified", "deleted", "type_changed"]
    old_mode: str | None
    new_mode: str | None
    binary: bool
    additions: int
    deletions: int
    diff: str
    truncated: bool = False


def diff(ws: Workspace, start: str | int = "base", end: str | int = "now") -> list[FileChange]:
    """The changes from ``start`` to ``end``: each a checkpoint's number, ``base``, ``now`` (the
    files as they are) or a commit."""
    return diff_trees(ws.repo, _tree(ws, start), _tree(ws, end))


def task_changes(ws: Workspace) -> list[FileChange]:
    """Everything the task changed: its files now against where the workspace started."""
    return diff(ws, "base", "now")


def _tree(ws: Workspace, point: str | int) -> str:
    if str(point) == "now":
        with private_index(ws) as index:
            return snapshot_tree(ws, index)
    return resolve(ws, point)


def diff_trees(repo: GitRepo, a: str, b: str) -> list[FileChange]:
    """Per-file unified diffs between trees ``a`` and ``b`` (plumbing only: no external diff, no
    textconv, no repository setting changes the format)."""
    common = ["diff-tree", "-r", "--no-renames", "--no-ext-diff", "--no-textconv", "-O/dev/null"]
    raw = run_git([*common, "-z", "--raw", "--no-abbrev", a, b], repo=repo).stdout
    entries = _parse_raw(raw)
    if not entries:
        return []
    patch = run_git(
        [*common, "-p", "--no-color", "--full-index", "--src-prefix=a/", "--dst-prefix=b/", a, b],
        repo=repo,
        max_output=MAX_DIFF_OUTPUT,
    ).stdout
    chunks = _split(patch)
    if len(chunks) != len(entries):
        raise GitError(f"git diff-tree gave {len(chunks)} file diffs for {len(entries)} changed files")
    return [_change(entry, chunk) for entry, chunk in zip(entries, chunks, strict=True)]


def _parse_raw(raw: bytes) -> list[tuple[str, str, str, str]]:
    """(status, old mode, new mode, path) per changed file, from ``--raw -z``."""
    fields = raw.split(b"\0")
    out = []
    i = 0
    while i + 1 < len(fields) and fields[i].startswith(b":"):
        meta = fields[i][1:].decode().split(" ")
        path = fields[i + 1].decode("utf-8", "surrogateescape")
        out.append((meta[4][0], meta[0], meta[1], path))
        i += 2
    return out


def _split(patch: bytes) -> list[bytes]:
    # Every file's diff begins with a "diff --git" line; a content line always begins with " ", "+",
    # "-" or "\", so the split cannot fall inside one.
    chunks: list[bytes] = []
    for line in patch.splitlines(keepends=True):
        if line.startswith(b"diff --git "):
            chunks.append(line)
        elif chunks:
            chunks[-1] += line
    return chunks


def _change(entry: tuple[str, str, str, str], chunk: bytes) -> FileChange:
    status, old_mode, new_mode, path = entry
    text = chunk.decode("utf-8", "replace")
    additions = deletions = 0
    in_hunks = False
    binary = False
    for line in text.splitlines():
        if line.startswith("@@"):
            in_hunks = True
        elif in_hunks and line.startswith("+"):
            additions += 1
        elif in_hunks and line.startswith("-"):
            deletions += 1
        elif not in_hunks and line.startswith("Binary files "):
            binary = True
    truncated = len(text) > MAX_FILE_DIFF
    return FileChange(
        path=path,
        status=_STATUS.get(status, "modified"),
        old_mode=None if old_mode == "000000" else old_mode,
        new_mode=None if new_mode == "000000" else new_mode,
        binary=binary,
        additions=additions,
        deletions=deletions,
        diff=text[:MAX_FILE_DIFF],
        truncated=truncated,
    )


def commit_changes(ws: Workspace, message: str, author: tuple[str, str] | None = None) -> str | None:
    """Commit the workspace's files as they are on the task's branch (after whatever the agent
    committed itself) and return the commit; None when there is nothing to commit.  The branch is
    the user's to merge or push.  When the work tree is on that branch, its index is brought up to
    date too, so ``git status`` there is clean."""
    if not message.strip():
        raise WorkspaceError("a commit needs a message")
    repo = ws.repo
    ref = f"refs/heads/{ws.info.branch}"
    found = run_git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], repo=repo, check=False)
    if found.returncode:
        raise WorkspaceError(f"the task's branch {ws.info.branch} is gone")
    tip = found.stdout.decode().strip()
    with private_index(ws) as index:
        tree = snapshot_tree(ws, index)
        if tree == resolve(ws, tip):
            return None
        commit = commit_tree(repo, tree, message.rstrip() + "\n", [tip], author)
        run_git(["update-ref", "-m", "orchestrate: the task's changes", ref, commit, tip], repo=repo)
        head = run_git(["symbolic-ref", "--quiet", "HEAD"], repo=repo, check=False).stdout.decode().strip()
        if head == ref:
            _replace_index(ws, index)
    return commit


def _replace_index(ws: Workspace, index: os.PathLike[str]) -> None:
    """Our up-to-date index becomes the work tree's, through git's own lock file (skipped if git is
    busy there: the commit stands, ``git status`` refreshes the index itself)."""
    target = ws.info.git_dir / "index"
    lock = ws.info.git_dir / "index.lock"
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return
    try:
        with os.fdopen(fd, "wb") as out, open(index, "rb") as given:  # noqa: PTH123
            out.write(given.read())
        lock.replace(target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
