"""Workspaces: a git worktree (or a plain copy) per task, with its ignored files copied in, a setup
command, a block of ports; checkpoints of its files after every turn, diffs and rollback; and the
task's changes as per-file diffs or a commit on its branch.

It knows nothing of agents: the engine (and ``orchestrate run --worktree``) make a workspace, run the
agent in it, and checkpoint around each turn.  Every function blocks (git runs as a subprocess with a
timeout); async code calls them through a worker thread.  Every git command goes through
:mod:`.git`, which fixes git's environment and configuration so that nothing a repository holds
(hooks, ``core.fsmonitor``, filter drivers, a pager ...) runs on our behalf.
"""

from __future__ import annotations

from .changes import FileChange, commit_changes, diff, task_changes
from .checkpoints import Checkpoint, checkpoint, list_checkpoints, resolve, rollback
from .create import (
    create_workspace,
    find_workspaces,
    open_workspace,
    remove_workspace,
    repository_of,
    run_setup,
)
from .git import GitError
from .model import (
    NotAGitRepositoryError,
    SetupFailedError,
    SetupResult,
    Workspace,
    WorkspaceError,
    WorkspaceInfo,
    WorkspaceInUseError,
    default_root,
)
from .paths import OutsideRootError

__all__ = [
    "Checkpoint",
    "FileChange",
    "GitError",
    "NotAGitRepositoryError",
    "OutsideRootError",
    "SetupFailedError",
    "SetupResult",
    "Workspace",
    "WorkspaceError",
    "WorkspaceInUseError",
    "WorkspaceInfo",
    "checkpoint",
    "commit_changes",
    "create_workspace",
    "default_root",
    "diff",
    "find_workspaces",
    "list_checkpoints",
    "open_workspace",
    "remove_workspace",
    "repository_of",
    "resolve",
    "rollback",
    "run_setup",
    "task_changes",
]
