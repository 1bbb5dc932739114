"""The workspace layer as the API uses it (blocking: the routes call these in a worker thread).

A task's workspace is made by the worker that runs it; here a new task's request is checked first,
so a bad one is refused with its code at once instead of failing the task later: the repository (for
a worktree) and its base ref, and where the workspace would go, against the server's roots."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..engine.workspaces import LIVE_TASK, remove_task_workspace
from ..store import RunRecord, Store, TaskRecord
from ..task import WorkspaceOptions
from ..workspace import (
    Checkpoint,
    FileChange,
    Workspace,
    WorkspaceError,
    commit_changes,
    default_root,
    list_checkpoints,
    open_workspace,
    repository_of,
)
from ..workspace.git import GitRepo, run_git
from ..workspace.paths import inside
from .errors import ApiError
from .models import WorkspaceRequest

__all__ = [
    "MAX_DIFF_CHARS",
    "MAX_DIFF_FILES",
    "bound_diff",
    "check_new_workspace",
    "commit_task",
    "existing_checkpoint",
    "open_task_workspace",
    "remove",
    "turn_bounds",
    "turns_of",
    "workspace_run_options",
]

MAX_DIFF_CHARS = 8 * 1024 * 1024
"""Characters of diff text one response holds (each file's own is cut at 1 MiB by the layer)."""
MAX_DIFF_FILES = 5000
"""Changed files one response lists."""


# --- a new task --------------------------------------------------------------------------------------


def workspace_run_options(mode: str, request: WorkspaceRequest | None, root: Path | None) -> dict[str, Any]:
    """The task's run options for its workspace: the client's choices, and the server's root."""
    given = request or WorkspaceRequest()
    options: dict[str, Any] = {
        "base": given.base,
        "setup": given.setup,
        "setup_timeout": given.setup_timeout,
        "keep": given.keep,
        # Resolved here, so a worker elsewhere on the store makes it where this server said.
        "root": str(Path(os.path.realpath(root or default_root()))),
    }
    if given.copy_globs is not None:
        options["copy_globs"] = given.copy_globs
    WorkspaceOptions(**options)  # the layer's own validation, now
    return {"workspace": mode, "workspace_options": options}


def check_new_workspace(mode: str, cwd: Path, roots: list[Path], options: dict[str, Any]) -> None:
    """Refuse now what the worker would fail on: no repository (worktree), a repository reaching
    outside the roots, a base that names no commit, a workspace root inside the source."""
    root = Path(options["root"])
    source = cwd
    if mode == "worktree":
        top, git_dir = repository_of(cwd)  # NotAGitRepositoryError: its own code
        if roots and not any(top.is_relative_to(r.resolve()) for r in roots):
            # The worktree holds the whole repository, and the glob copies come from its top.
            raise ApiError(
                "invalid_request",
                f"{cwd} is in the repository {top}, which is outside the directories this server allows",
            )
        if roots:
            # A `.git` file under a root may name a git directory anywhere (`gitdir: /elsewhere`): the
            # worktree would check out that repository's files and write its refs.  Its git directory
            # and the common one (a linked worktree's) must lie under the roots too.
            common = run_git(
                ["rev-parse", "--path-format=absolute", "--git-common-dir"], repo=GitRepo(git_dir, top)
            ).stdout
            common_dir = Path(os.path.realpath(common.decode().strip()))
            for where in (git_dir, common_dir):
                if not any(where.is_relative_to(r.resolve()) for r in roots):
                    raise ApiError(
                        "invalid_request",
                        f"{cwd} is a repository whose git directory {where} is outside the directories "
                        "this server allows",
                    )
        base = options.get("base") or "HEAD"
        found = run_git(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{base}^{{commit}}"],
            repo=GitRepo(git_dir, top),
            check=False,
        )
        if found.returncode:
            why = "the repository has no commit yet" if base == "HEAD" else f"no commit {base!r} in {top}"
            raise ApiError("invalid_request", f"cannot make a worktree: {why}")
        source = top
    if inside(source, root) or inside(root, source):
        raise ApiError(
            "invalid_request", f"the workspaces' root {root} must be outside {source} (and not hold it)"
        )


# --- a task's workspace ------------------------------------------------------------------------------


def open_task_workspace(task: TaskRecord) -> Workspace:
    """The task's workspace, or ``no_workspace``."""
    if not task.workspace:
        mode = task.run_options.get("workspace", "here")
        why = (
            "it runs in its own directory"
            if mode == "here"
            else "its workspace is made when it starts, or it was removed"
        )
        raise ApiError("no_workspace", f"task {task.id} has no workspace ({why})")
    try:
        return open_workspace(task.workspace)
    except WorkspaceError as exc:
        raise ApiError("no_workspace", f"task {task.id}: {exc}") from exc


def turns_of(runs: list[RunRecord]) -> dict[int, tuple[int, int, str]]:
    """Checkpoint number -> (turn, run id, "start" | "end")."""
    turns: dict[int, tuple[int, int, str]] = {}
    for n, run in enumerate(runs, start=1):
        if run.checkpoint_start is not None:
            turns[run.checkpoint_start] = (n, run.id, "start")
        if run.checkpoint_end is not None:
            turns[run.checkpoint_end] = (n, run.id, "end")
    return turns


def turn_bounds(task_id: int, runs: list[RunRecord], turn: int) -> tuple[str, str]:
    """The checkpoints turn ``turn`` started and ended on; ``now`` for the end of the turn that is
    running (what it has changed so far)."""
    if turn > len(runs):
        raise ApiError("turn_not_found", f"task {task_id} has {len(runs)} turn(s); there is no turn {turn}")
    run = runs[turn - 1]
    if run.checkpoint_start is None:
        raise ApiError("turn_not_found", f"turn {turn} of task {task_id} (run {run.id}) took no checkpoint")
    if run.checkpoint_end is not None:
        return str(run.checkpoint_start), str(run.checkpoint_end)
    if run.status == "running":
        return str(run.checkpoint_start), "now"
    raise ApiError(
        "turn_not_found", f"turn {turn} of task {task_id} (run {run.id}) ended without a checkpoint"
    )


def existing_checkpoint(ws: Workspace, points: list[str]) -> list[Checkpoint]:
    """The workspace's checkpoints, after checking each numbered one of ``points`` is among them."""
    found = list_checkpoints(ws)
    ids = {c.id for c in found}
    for point in points:
        if point.isdigit() and int(point) not in ids:
            raise ApiError("checkpoint_not_found", f"the workspace {ws.info.name} has no checkpoint {point}")
    return found


def bound_diff(changes: list[FileChange]) -> tuple[list[FileChange], bool, int]:
    """At most MAX_DIFF_FILES files and MAX_DIFF_CHARS of diff text: past that, a file is listed
    with its counts but no diff (``truncated``); returns the files, whether anything was cut, and
    how many files were left out."""
    kept: list[FileChange] = []
    total = 0
    cut = False
    for change in changes[:MAX_DIFF_FILES]:
        cut = cut or change.truncated
        if total + len(change.diff) > MAX_DIFF_CHARS:
            change = change.model_copy(update={"diff": "", "truncated": True})
            cut = True
        total += len(change.diff)
        kept.append(change)
    omitted = max(0, len(changes) - MAX_DIFF_FILES)
    return kept, cut or omitted > 0, omitted


def _not_live(task: TaskRecord, doing: str) -> None:
    if task.status in LIVE_TASK:
        raise ApiError(
            "workspace_in_use", f"task {task.id} is {task.status}: cancel it (or let it end) before {doing}"
        )


def commit_task(
    store: Store, task_id: int, message: str, author: tuple[str, str] | None
) -> tuple[Workspace, str | None]:
    """Commit the task's files on its branch; refused while a run works there (the files are
    changing, and the run holds the workspace)."""
    task = store.get(task_id)
    ws = open_task_workspace(task)
    _not_live(task, "committing its files")
    with ws.exclusive():
        return ws, commit_changes(ws, message, author)


def remove(store: Store, task_id: int) -> tuple[Workspace, bool]:
    """Remove the task's workspace (refused while a run uses it); returns it and whether its branch
    was kept (it holds commits beyond its base)."""
    task = store.get(task_id)
    open_task_workspace(task)  # no_workspace, before anything else
    _not_live(task, "removing its workspace")
    ws = remove_task_workspace(store, task_id)
    info = ws.info
    kept = False
    if info.mode == "worktree" and info.source_git_dir is not None:
        tip = run_git(
            ["rev-parse", "--verify", "--quiet", f"refs/heads/{info.branch}"],
            repo=GitRepo(info.source_git_dir, info.source),
            check=False,
        )
        kept = tip.returncode == 0
    return ws, kept
