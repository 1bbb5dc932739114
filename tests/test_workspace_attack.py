"""A hostile repository: hooks, ``core.fsmonitor``, filter and diff drivers, signing, a pager, an
editor, ``core.worktree`` elsewhere, settings that would hide changes, and symlinks that lead out.
Every command the repository names writes to a marker file; after a whole task's life (worktree,
checkpoints, diffs, rollback, commit, removal) the marker must not exist, and a control at the end
shows that plain git does run them."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from orchestrate.workspace import (
    GitError,
    WorkspaceError,
    checkpoint,
    commit_changes,
    create_workspace,
    diff,
    list_checkpoints,
    remove_workspace,
    rollback,
    task_changes,
)
from orchestrate.workspace.git import run_git

from .helpers import marked
from .test_workspace_layer import git, make_repo, options, tree_state, user_view

HOOKS = [
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
]


def evil(marker: Path, name: str) -> str:
    """A command that leaves its name in ``marker`` (and passes its input through, as a filter would)."""
    return f"echo {name} >> {marker}; cat"


def plant(repo: Path, marker: Path, elsewhere: Path) -> None:
    """Arm ``repo``: everything below is what an agent with write access to it could set."""
    hooks = repo / "evil-hooks"
    for directory in (repo / ".git" / "hooks", hooks):
        directory.mkdir(exist_ok=True)
        for hook in HOOKS:
            path = directory / hook
            path.write_text(f"#!/bin/sh\necho hook:{directory.name}/{hook} >> {marker}\n")
            path.chmod(0o755)
    included = repo.parent / "included.gitconfig"
    included.write_text(f"[core]\n\tfsmonitor = {evil(marker, 'included-fsmonitor')}\n")
    settings = {
        "core.fsmonitor": evil(marker, "fsmonitor"),
        "core.hooksPath": str(hooks),
        "core.pager": evil(marker, "pager"),
        "core.editor": evil(marker, "editor"),
        "sequence.editor": evil(marker, "sequence-editor"),
        "core.sshCommand": evil(marker, "ssh"),
        "core.askPass": evil(marker, "askpass"),
        "credential.helper": f"!{evil(marker, 'credential')}",
        "diff.external": evil(marker, "diff-external"),
        "diff.evil.textconv": evil(marker, "textconv"),
        "diff.evil.command": evil(marker, "diff-command"),
        "filter.evil.clean": evil(marker, "clean"),
        "filter.evil.smudge": evil(marker, "smudge"),
        "filter.evil.required": "true",
        "filter.proc.process": evil(marker, "filter-process"),
        "filter.proc.required": "true",
        "commit.gpgSign": "true",
        "gpg.program": evil(marker, "gpg"),
        "core.worktree": str(elsewhere),
        "submodule.recurse": "true",
        "core.ignoreStat": "true",  # would hide edits from a snapshot
        "core.sparseCheckout": "true",  # would leave files out of a checkout
        "include.path": str(included),
        "alias.add": evil(marker, "alias"),
    }
    for key, value in settings.items():
        git(repo, "config", key, value)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "sparse-checkout").write_text("/README.md\n")


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path, Path]:
    repo = make_repo(tmp_path / "repo")
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n*.proc filter=proc\n")
    (repo / "data.proc").write_text("processed?\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "attributes")
    marker, elsewhere = tmp_path / "MARKER", tmp_path / "elsewhere"
    elsewhere.mkdir()
    plant(repo, marker, elsewhere)
    return repo, marker, elsewhere


def assert_never_ran(marker: Path) -> None:
    ran = marker.read_text() if marker.exists() else ""
    assert ran == "", f"the repository's commands ran: {ran}"


def test_nothing_the_repository_names_ever_runs(hostile: tuple[Path, Path, Path], tmp_path: Path) -> None:
    repo, marker, elsewhere = hostile
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    # Every file is there, as committed (no sparse checkout, no smudge filter).
    assert (ws.path / "src" / "app.py").read_text() == "print('hello')\n"
    assert (ws.path / "data.proc").read_text() == "processed?\n"
    start = checkpoint(ws, "start")
    # The agent's turn: edits (which core.ignoreStat would hide), a new file, its own filter driver.
    (ws.path / "src" / "app.py").write_text("print('edited')\n")
    (ws.path / "new.txt").write_text("new\n")
    with (ws.path / ".gitattributes").open("a") as f:
        f.write("*.txt filter=agent\n")
    git(repo, "config", "filter.agent.clean", evil(marker, "agent-clean"))
    git(repo, "config", "filter.agent.smudge", evil(marker, "agent-smudge"))
    end = checkpoint(ws, "end")
    changes = {c.path: c for c in diff(ws, start.id, end.id)}
    assert set(changes) == {".gitattributes", "new.txt", "src/app.py"}
    assert "+print('edited')" in changes["src/app.py"].diff  # the bytes, not a textconv of them
    assert {c.path for c in task_changes(ws)} == set(changes)
    rollback(ws, start.id)
    assert (ws.path / "src" / "app.py").read_text() == "print('hello')\n" and not (
        ws.path / "new.txt"
    ).exists()
    rollback(ws, end.id)
    assert commit_changes(ws, "the task's work") is not None
    assert [c.id for c in list_checkpoints(ws)] == [1, 2, 3, 4]
    remove_workspace(ws, delete_branch=True)
    copy = create_workspace(repo, "c", "copy", options(tmp_path))
    checkpoint(copy, "copy")
    remove_workspace(copy)
    assert_never_ran(marker)
    assert list(elsewhere.iterdir()) == []  # core.worktree pointed here: never used
    # The control: plain git in that repository does run them (so the marker would have shown it).
    git(repo, "status", check=False)
    assert "fsmonitor" in marker.read_text()


def test_our_own_environment_cannot_redirect_git(
    hostile: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, marker, _ = hostile
    decoy = make_repo(tmp_path / "decoy")
    decoy_view = user_view(decoy)
    for name, value in {
        "GIT_DIR": str(decoy / ".git"),
        "GIT_WORK_TREE": str(decoy),
        "GIT_INDEX_FILE": str(decoy / ".git" / "index"),
        "GIT_CONFIG_PARAMETERS": f"'core.fsmonitor'='{evil(marker, 'env-fsmonitor')}'",
        "GIT_CONFIG_GLOBAL": str(tmp_path / "global"),
        "GIT_EXTERNAL_DIFF": evil(marker, "env-external-diff"),
        "GIT_PAGER": evil(marker, "env-pager"),
    }.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "global").write_text(f"[core]\n\tfsmonitor = {evil(marker, 'global-fsmonitor')}\n")
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    (ws.path / "x.txt").write_text("x\n")
    assert [c.path for c in task_changes(ws)] == ["x.txt"]
    monkeypatch.undo()
    assert user_view(decoy) == decoy_view
    assert_never_ran(marker)


def test_rollback_never_writes_through_a_symlink_out_of_the_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    (ws.path / "escape").mkdir()
    (ws.path / "escape" / "file.txt").write_text("inside\n")
    (ws.path / "src" / "extra.py").write_text("x = 1\n")
    start = checkpoint(ws, "start")
    expected = tree_state(ws.path)
    # The agent swaps directories for symlinks that lead out, one tracked and one it hides as ignored.
    (ws.path / "escape" / "file.txt").unlink()
    (ws.path / "escape").rmdir()
    (ws.path / "escape").symlink_to(outside)
    (ws.path / "src" / "extra.py").unlink()
    (ws.path / "src" / "app.py").unlink()
    (ws.path / "src").rmdir()
    (ws.path / "src").symlink_to(outside)
    with (ws.path / ".gitignore").open("a") as f:
        f.write("src\n")
    checkpoint(ws, "swapped")
    rollback(ws, start.id)
    assert list(outside.iterdir()) == []
    assert tree_state(ws.path) == expected
    assert not (ws.path / "escape").is_symlink() and not (ws.path / "src").is_symlink()


def test_copied_files_never_go_through_a_committed_symlink(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "cfg").mkdir()
    (repo / "cfg" / "keep").write_text("tracked\n")
    git(repo, "add", "cfg/keep")
    git(repo, "commit", "-q", "-m", "cfg")
    (repo / "cfg" / ".env").write_text("SECRET=1\n")  # ignored, matches the default glob
    # A branch where cfg is a symlink to a directory outside: the worktree starts from it.
    git(repo, "checkout", "-q", "-b", "trap")
    git(repo, "rm", "-q", "-r", "--cached", "cfg")
    git(repo, "update-index", "--add", "--cacheinfo", f"120000,{_blob(repo, str(outside))},cfg")
    git(repo, "commit", "-q", "-m", "trap")
    git(repo, "checkout", "-q", "-f", "main")
    (repo / "cfg" / ".env").write_text("SECRET=1\n")
    with pytest.raises(WorkspaceError, match="not a plain directory"):
        create_workspace(repo, "t", "worktree", options(tmp_path, base="trap"))
    assert list(outside.iterdir()) == []
    # Nothing half-made is left: no worktree, no branch.
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert "orchestrate/t" not in git(repo, "branch")


def _blob(repo: Path, content: str) -> str:
    import subprocess

    done = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        cwd=repo,
        input=content,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout.strip()


def test_every_git_call_is_bounded_and_its_processes_killed(tmp_path: Path) -> None:
    mark = "31.4159"
    with pytest.raises(GitError, match=r"longer than 0\.5 s"):
        run_git(["slow"], cwd=tmp_path, config=[("alias.slow", f"!sleep {mark}")], timeout=0.5)
    deadline = time.monotonic() + 5  # SIGKILL is sent at once; the kernel takes a moment to act on it
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marked(mark) == []


def test_an_unreadable_file_is_neither_recorded_nor_deleted(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    repo = make_repo(tmp_path / "repo")
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    start = checkpoint(ws, "start")
    secret = ws.path / "secret.txt"
    secret.write_text("mine\n")
    secret.chmod(0)
    checkpoint(ws, "with an unreadable file")
    rollback(ws, start.id)
    assert secret.exists()
    secret.chmod(stat.S_IRUSR | stat.S_IWUSR)
