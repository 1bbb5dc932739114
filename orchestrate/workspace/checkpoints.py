"""Checkpoints: snapshots of a workspace's files, each a commit under a private ref of the repository
(``refs/orchestrate/checkpoints/NAME/N``), so they survive a crash and never show among the user's
branches, index or stash.  Rollback puts the files back as a checkpoint had them."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from .git import GitError, neutral_filters, run_git
from .model import Workspace, WorkspaceError
from .snapshot import commit_tree, private_index, snapshot_tree

__all__ = ["Checkpoint", "checkpoint", "list_checkpoints", "resolve", "rollback"]

_TRIES = 20  # numbers taken by a concurrent checkpoint before we give up


class Checkpoint(BaseModel):
    """One snapshot: ``id`` counts up from 1 within its workspace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    commit: str
    tree: str
    ref: str
    created_at: float
    label: str


def checkpoint(ws: Workspace, label: str) -> Checkpoint:
    """Snapshot the workspace's files now (untracked ones included, ignored ones excluded)."""
    with private_index(ws) as index:
        tree = snapshot_tree(ws, index)
    return _record(ws, tree, label)


def _record(ws: Workspace, tree: str, label: str) -> Checkpoint:
    repo = ws.repo
    head = run_git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], repo=repo, check=False)
    parents = [head.stdout.decode().strip()] if head.returncode == 0 else []
    commit = commit_tree(
        repo, tree, f"{_one_line(label)}\n\norchestrate checkpoint of {ws.info.name}\n", parents
    )
    taken = {c.id for c in list_checkpoints(ws)}
    number = max(taken, default=0) + 1
    for _ in range(_TRIES):
        ref = f"{ws.refs}{number}"
        # The zero old value: created only if no one took the number meanwhile.
        done = run_git(["update-ref", ref, commit, "0" * len(commit)], repo=repo, check=False)
        if done.returncode == 0:
            return _read(ws, ref) or Checkpoint(
                id=number, commit=commit, tree=tree, ref=ref, created_at=0.0, label=label
            )
        number += 1
    raise WorkspaceError(f"could not record a checkpoint of {ws.info.name} (its refs keep changing)")


def list_checkpoints(ws: Workspace) -> list[Checkpoint]:
    """The workspace's checkpoints, oldest first."""
    fmt = "%(refname)%00%(objectname)%00%(tree)%00%(creatordate:unix)%00%(contents:subject)"
    out = run_git(["for-each-ref", f"--format={fmt}", ws.refs], repo=ws.repo).stdout
    found = []
    for line in out.decode("utf-8", "replace").splitlines():
        cp = _parse(ws, line)
        if cp is not None:
            found.append(cp)
    return sorted(found, key=lambda c: c.id)


def _read(ws: Workspace, ref: str) -> Checkpoint | None:
    return next((c for c in list_checkpoints(ws) if c.ref == ref), None)


def _parse(ws: Workspace, line: str) -> Checkpoint | None:
    parts = line.split("\0")
    if len(parts) != 5 or not parts[0].startswith(ws.refs):
        return None
    number = parts[0][len(ws.refs) :]
    if not number.isdigit():
        return None
    return Checkpoint(
        id=int(number),
        commit=parts[1],
        tree=parts[2],
        ref=parts[0],
        created_at=float(parts[3] or 0),
        label=parts[4],
    )


def resolve(ws: Workspace, point: str | int) -> str:
    """The tree of ``point``: a checkpoint's number, ``base`` (where the workspace started), or a
    commit of the repository."""
    text = str(point).strip()
    if text == "base":
        return _tree(ws, ws.info.base)
    if text.isdigit():
        found = next((c for c in list_checkpoints(ws) if c.id == int(text)), None)
        if found is None:
            raise WorkspaceError(f"the workspace {ws.info.name} has no checkpoint {text}")
        return found.tree
    if re.fullmatch(r"[0-9a-fA-F]{7,64}", text):
        return _tree(ws, text)
    raise WorkspaceError(f"{text!r} is not a checkpoint: give its number, `base`, or a commit")


def _tree(ws: Workspace, commit: str) -> str:
    try:
        out = run_git(["rev-parse", "--verify", "--end-of-options", f"{commit}^{{tree}}"], repo=ws.repo)
    except GitError as exc:
        raise WorkspaceError(f"no commit {commit} in the workspace's repository") from exc
    return out.stdout.decode().strip()


def rollback(ws: Workspace, to: str | int) -> Checkpoint:
    """Put the workspace's files back as checkpoint ``to`` had them: files added since are removed,
    changed and deleted ones restored; ignored files, the branch, HEAD and the agent's index are left
    alone.  A checkpoint of the files as they were is taken first and returned, so a rollback can be
    undone with another."""
    target = resolve(ws, to)
    repo = ws.repo
    with private_index(ws) as index:
        tree = snapshot_tree(ws, index)
        before = _record(ws, tree, f"before rollback to {to}")
        # One-way merge onto the index that matches the files: what the target lacks is deleted,
        # the rest written (git never writes through a symlink on the way to a file).
        run_git(["read-tree", "--reset", "-u", target], repo=repo, index=index, config=neutral_filters(repo))
        after = snapshot_tree(ws, index)
    if after != target:
        raise WorkspaceError(
            f"the rollback of {ws.info.name} to {to} left files that differ from it "
            f"(checkpoint {before.id} holds them as they were)"
        )
    return before


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200] or "checkpoint"
