"""A snapshot of a work tree as a git tree, made through an index of our own.

The agent's index (and in a worktree of the user's repository, everything the user sees) is never
read or written: each snapshot copies our private index (kept beside the workspace, so the stat data
of unchanged files spares rehashing them), lets ``git add -A`` bring it up to date with the files
(untracked ones included, ignored ones excluded, as ``.gitignore`` says), writes the tree, and puts the
index back in one rename.  Filter drivers are switched off first, so no command of the repository
runs and the tree holds the bytes as they are on disk.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from .git import GitRepo, neutral_filters, run_git
from .model import Workspace, WorkspaceError

__all__ = ["EMPTY_TREE", "commit_tree", "private_index", "snapshot_tree"]

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
IDENTITY = {
    "GIT_AUTHOR_NAME": "orchestrate",
    "GIT_AUTHOR_EMAIL": "orchestrate@localhost",
    "GIT_COMMITTER_NAME": "orchestrate",
    "GIT_COMMITTER_EMAIL": "orchestrate@localhost",
}


@contextlib.contextmanager
def private_index(ws: Workspace) -> Iterator[Path]:
    """A temporary copy of the workspace's own index; kept (renamed over it) if the block succeeds."""
    tmp = ws.info.meta / f"index.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        if ws.index.exists():
            # With its times: git tells a file changed in the second the index was written (same
            # size, same mtime) by comparing with the index file's own mtime ("racy git").  A copy
            # stamped now would hide such a change.
            shutil.copy2(ws.index, tmp)
        yield tmp
        if tmp.exists():
            tmp.replace(ws.index)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def snapshot_tree(ws: Workspace, index: Path) -> str:
    """Bring ``index`` up to date with the work tree and return the tree it describes."""
    repo = ws.repo
    if not ws.path.is_dir():
        raise WorkspaceError(f"the workspace {ws.info.name} has no work tree at {ws.path} (removed?)")
    filters = neutral_filters(repo)
    # --ignore-errors: a file that cannot be read is left as the index had it (neither recorded
    # anew nor, on a rollback, deleted); the rest of the snapshot is made.
    run_git(["add", "-A", "--ignore-errors", "--", "."], repo=repo, index=index, config=filters, check=False)
    # write-tree may look at racily clean files again: the filters stay off for it too.
    return _text(run_git(["write-tree"], repo=repo, index=index, config=filters).stdout)


def commit_tree(
    repo: GitRepo, tree: str, message: str, parents: list[str], author: tuple[str, str] | None = None
) -> str:
    """A commit of ``tree`` (never signed, no hook), by ``author`` (name, email; default orchestrate)."""
    args = ["commit-tree", "--no-gpg-sign", tree]
    for parent in parents:
        args += ["-p", parent]
    stamp = f"{int(time.time())} +0000"
    env = IDENTITY | {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    if author is not None:
        name, email = author
        env |= {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email}
        env |= {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
    return _text(run_git(args, repo=repo, input=message.encode(), env=env).stdout)


def _text(out: bytes) -> str:
    return out.decode().strip()
