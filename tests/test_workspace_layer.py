"""The workspace layer on real git repositories made by the tests: worktrees side by side, copied
ignored files, setup commands, ports, checkpoints, diffs, rollback to the exact tree, the task's
commit, removal, plain copies, and the user's own checkout never touched."""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from orchestrate.task import WorkspaceOptions
from orchestrate.workspace import (
    NotAGitRepositoryError,
    SetupFailedError,
    Workspace,
    WorkspaceError,
    WorkspaceInUseError,
    checkpoint,
    commit_changes,
    create_workspace,
    diff,
    find_workspaces,
    list_checkpoints,
    open_workspace,
    remove_workspace,
    rollback,
    run_setup,
    task_changes,
)

from .helpers import pid_alive

IDENTITY = ["-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "commit.gpgSign=false"]


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """The test's own git (never the workspace layer's), with an identity of its own."""
    # No optional locks: `git status` never rewrites the index, so a changed index is someone else's doing.
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_OPTIONAL_LOCKS": "0",
    }
    done = subprocess.run(
        ["git", *IDENTITY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=30, check=False
    )
    if check and done.returncode:
        raise AssertionError(f"git {args}: {done.stderr}")
    return done.stdout


def make_repo(path: Path) -> Path:
    """A repository with a few commits' worth of files, an ignored .env, and a file the user is editing."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("# demo\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("print('hello')\n")
    (path / "run.sh").write_text("#!/bin/sh\necho run\n")
    (path / "run.sh").chmod(0o755)
    (path / ".gitignore").write_text(".env*\nbuild/\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    (path / ".env").write_text("API_KEY=local-only\n")
    (path / ".env.local").write_text("DEBUG=1\n")
    (path / "build").mkdir()
    (path / "build" / "out.bin").write_bytes(b"\0" * 10)
    return path


def options(tmp_path: Path, **more: object) -> WorkspaceOptions:
    return WorkspaceOptions(root=tmp_path / "workspaces", **more)  # type: ignore[arg-type]


def tree_state(root: Path) -> dict[str, tuple[str, object, int]]:
    """Every file, symlink and directory under ``root`` (``.git`` aside): kind, content, mode bits."""
    state: dict[str, tuple[str, object, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in [*dirnames, *filenames]:
            full = Path(dirpath) / name
            rel = str(full.relative_to(root))
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                state[rel] = ("link", os.readlink(full), 0)
            elif stat.S_ISDIR(st.st_mode):
                state[rel] = ("dir", None, 0)
            else:
                state[rel] = ("file", full.read_bytes(), st.st_mode & 0o111)
    return state


def user_view(repo: Path) -> dict[str, str]:
    """What the user of ``repo`` sees: index bytes, HEAD, branches, stash, status."""
    return {
        "index": hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest(),
        "head": (repo / ".git" / "HEAD").read_text(),
        "head_commit": git(repo, "rev-parse", "HEAD"),
        # The tasks' own branches aside: the user's branches and stash.
        "branches": "".join(
            line
            for line in git(repo, "for-each-ref", "refs/heads", "refs/stash").splitlines(keepends=True)
            if "refs/heads/orchestrate/" not in line
        ),
        "stash": git(repo, "stash", "list"),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored"),
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def user_has_work_in_progress(repo: Path) -> None:
    """A stash, a staged change and an unstaged one: none of it may move."""
    (repo / "README.md").write_text("# demo\nstashed\n")
    git(repo, "stash", "-q")
    (repo / "src" / "app.py").write_text("print('staged')\n")
    git(repo, "add", "src/app.py")
    (repo / "README.md").write_text("# demo\nunstaged\n")


# --- worktrees ------------------------------------------------------------------------------------


def test_a_worktree_starts_from_head_with_the_ignored_env_files_copied_and_ports(
    repo: Path, tmp_path: Path
) -> None:
    ws = create_workspace(repo, "task-1", "worktree", options(tmp_path))
    assert not ws.path.is_relative_to(repo)
    assert (ws.path / "src" / "app.py").read_text() == "print('hello')\n"
    assert os.access(ws.path / "run.sh", os.X_OK)
    # The gitignored .env files come along; other ignored files (build/) do not.
    assert (ws.path / ".env").read_text() == "API_KEY=local-only\n"
    assert (ws.path / ".env.local").read_text() == "DEBUG=1\n"
    assert not (ws.path / "build").exists()
    assert ws.info.copied == [".env", ".env.local"]
    assert git(ws.path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "orchestrate/task-1"
    assert git(ws.path, "rev-parse", "HEAD") == git(repo, "rev-parse", "HEAD")
    assert git(ws.path, "status", "--porcelain") == ""  # the agent's own git sees a clean checkout
    env = ws.env()
    first, count = int(env["ORCHESTRATE_PORT"]), int(env["ORCHESTRATE_PORT_COUNT"])
    assert count == 10 and env["ORCHESTRATE_PORTS"] == f"{first}-{first + 9}"
    # Found again from its record, as the engine finds it from the store.
    again = open_workspace(ws.info.model_dump(mode="json"))
    assert again.info == ws.info


def test_the_base_ref_and_the_copy_globs_are_options(repo: Path, tmp_path: Path) -> None:
    first = git(repo, "rev-parse", "HEAD").strip()
    (repo / "src" / "app.py").write_text("print('second')\n")
    git(repo, "commit", "-q", "-am", "second")
    (repo / "local.toml").write_text("x = 1\n")  # untracked, not ignored
    ws = create_workspace(
        repo, "t", "worktree", options(tmp_path, base=first, copy_globs=["*.toml", "build"])
    )
    assert (ws.path / "src" / "app.py").read_text() == "print('hello')\n"
    assert ws.info.base == first
    assert (ws.path / "local.toml").read_text() == "x = 1\n"
    assert (ws.path / "build" / "out.bin").read_bytes() == b"\0" * 10
    assert not (ws.path / ".env").exists()
    with pytest.raises(WorkspaceError, match="no commit 'nope'"):
        create_workspace(repo, "t2", "worktree", options(tmp_path, base="nope"))


def test_two_tasks_in_parallel_each_see_only_their_own_changes(repo: Path, tmp_path: Path) -> None:
    user_has_work_in_progress(repo)
    before = user_view(repo)
    results: dict[str, object] = {}

    def task(name: str, filename: str) -> None:
        try:
            ws = create_workspace(repo, name, "worktree", options(tmp_path))
            checkpoint(ws, "start")
            (ws.path / filename).write_text(f"made by {name}\n")
            (ws.path / "src" / "app.py").write_text(f"print('{name}')\n")
            checkpoint(ws, "end")
            results[name] = ws
        except BaseException as exc:  # handed to the test below
            results[name] = exc

    threads = [threading.Thread(target=task, args=(f"task-{i}", f"only-{i}.txt")) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    one, two = results["task-1"], results["task-2"]
    assert isinstance(one, Workspace) and isinstance(two, Workspace), results
    assert one.path != two.path and one.info.branch != two.info.branch
    assert one.info.ports and two.info.ports
    a, n = one.info.ports
    b, _ = two.info.ports
    assert abs(a - b) >= n  # disjoint port blocks
    assert not (one.path / "only-2.txt").exists() and not (two.path / "only-1.txt").exists()
    assert {(c.path, c.status) for c in task_changes(one)} == {
        ("only-1.txt", "added"),
        ("src/app.py", "modified"),
    }
    assert {(c.path, c.status) for c in task_changes(two)} == {
        ("only-2.txt", "added"),
        ("src/app.py", "modified"),
    }
    assert "+print('task-2')" in next(c.diff for c in task_changes(two) if c.path == "src/app.py")
    assert [c.id for c in list_checkpoints(one)] == [1, 2] == [c.id for c in list_checkpoints(two)]
    assert user_view(repo) == before


# --- setup ---------------------------------------------------------------------------------------


def test_the_setup_command_runs_in_the_workspace_with_its_ports(repo: Path, tmp_path: Path) -> None:
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    result = run_setup(ws, "echo installing; cat .env; echo port=$ORCHESTRATE_PORT; touch .setup-done")
    assert result.ok and result.exit_code == 0
    assert "installing\nAPI_KEY=local-only\nport=" + ws.env()["ORCHESTRATE_PORT"] in result.output
    assert (ws.path / ".setup-done").exists()
    assert open_workspace(ws.info).info.setup == result  # kept with the workspace
    assert (ws.info.meta / "setup.log").read_text() == result.output


def test_a_failing_setup_fails_with_its_output(repo: Path, tmp_path: Path) -> None:
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    with pytest.raises(SetupFailedError) as caught:
        run_setup(ws, "echo npm ERR! missing peer dependency >&2; exit 7")
    assert caught.value.result.exit_code == 7
    assert "exited with code 7" in str(caught.value) and "npm ERR! missing peer dependency" in str(
        caught.value
    )
    assert open_workspace(ws.info).info.setup == caught.value.result


def test_a_setup_past_its_timeout_is_killed_with_what_it_started(repo: Path, tmp_path: Path) -> None:
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    pid_file = ws.info.meta / "child.pid"
    with pytest.raises(SetupFailedError, match="timed out") as caught:
        run_setup(ws, f"sleep 60 & echo $! > {pid_file}; echo started; wait", timeout=0.5)
    assert caught.value.result.timed_out and "started" in caught.value.result.output
    assert not pid_alive(int(pid_file.read_text()))


def test_a_listening_port_is_never_handed_out(repo: Path, tmp_path: Path) -> None:
    from orchestrate.workspace.ports import FIRST_PORT

    with socket.socket() as busy:
        try:
            busy.bind(("127.0.0.1", FIRST_PORT + 3))
        except OSError:
            pytest.skip("the port is taken on this machine already")
        busy.listen()
        ws = create_workspace(repo, "t", "worktree", options(tmp_path, ports=5))
    assert ws.info.ports is not None
    first, count = ws.info.ports
    assert not first <= FIRST_PORT + 3 < first + count


# --- checkpoints, diffs, rollback ----------------------------------------------------------------


def turn(root: Path, number: int) -> None:
    """One turn of a fake agent: writes, edits and deletes files of every kind."""
    if number == 1:
        (root / "src" / "new.py").write_text("NEW = 1\n")
        (root / "src" / "app.py").write_text("print('edited')\n")
        (root / "data.bin").write_bytes(bytes(range(256)))
        (root / "link").symlink_to("src/new.py")
    elif number == 2:
        (root / "README.md").unlink()
        (root / "src" / "new.py").write_text("NEW = 2\n")
        (root / "run.sh").chmod(0o644)
        (root / "deep" / "er").mkdir(parents=True)
        (root / "deep" / "er" / "x.txt").write_text("x\n")
        (root / "link").unlink()
        (root / "link").symlink_to("run.sh")
    else:
        for p in (root / "src").iterdir():
            p.unlink()
        (root / "src").rmdir()
        (root / "src").write_text("now a file\n")


def test_checkpoints_diffs_and_rollback_to_the_exact_tree(repo: Path, tmp_path: Path) -> None:
    user_has_work_in_progress(repo)
    user = user_view(repo)
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    (ws.path / "build").mkdir()
    (ws.path / "build" / "cache").write_text("ignored, never touched\n")
    states = [tree_state(ws.path)]
    points = [checkpoint(ws, "before the agent starts")]
    for number in (1, 2, 3):
        turn(ws.path, number)
        points.append(checkpoint(ws, f"after turn {number}"))
        states.append(tree_state(ws.path))
    assert [(c.id, c.label) for c in list_checkpoints(ws)] == [
        (1, "before the agent starts"),
        (2, "after turn 1"),
        (3, "after turn 2"),
        (4, "after turn 3"),
    ]
    first = {c.path: c for c in diff(ws, 1, 2)}
    assert {p: c.status for p, c in first.items()} == {
        "data.bin": "added",
        "link": "added",
        "src/app.py": "modified",
        "src/new.py": "added",
    }
    assert first["data.bin"].binary and first["link"].new_mode == "120000"
    assert (first["src/app.py"].additions, first["src/app.py"].deletions) == (1, 1)
    assert "-print('hello')\n+print('edited')" in first["src/app.py"].diff
    second = {c.path: c.status for c in diff(ws, 2, 3)}
    assert second == {
        "README.md": "deleted",
        "deep/er/x.txt": "added",
        "link": "modified",
        "run.sh": "modified",
        "src/new.py": "modified",
    }
    assert next(c for c in diff(ws, 2, 3) if c.path == "run.sh").new_mode == "100644"
    assert {c.path for c in diff(ws, 3, 4)} >= {"src", "src/new.py", "src/app.py"}
    assert diff(ws, 4, "now") == []
    # Back to each checkpoint, newest first, then forward again: every file as it was, bit for bit.
    for index in (2, 1, 0, 3):
        rollback(ws, points[index].id)
        assert tree_state(ws.path) == states[index], f"rollback to {points[index].label}"
        assert (ws.path / "build" / "cache").read_text() == "ignored, never touched\n"
    assert git(ws.path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "orchestrate/t"
    assert user_view(repo) == user


def test_rollback_first_checkpoints_what_it_replaces(repo: Path, tmp_path: Path) -> None:
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    start = checkpoint(ws, "start")
    (ws.path / "precious.txt").write_text("unsaved work\n")
    saved = rollback(ws, start.id)
    assert not (ws.path / "precious.txt").exists()
    assert saved.label == f"before rollback to {start.id}"
    rollback(ws, saved.id)  # undone
    assert (ws.path / "precious.txt").read_text() == "unsaved work\n"
    rollback(ws, "base")
    assert not (ws.path / "precious.txt").exists()
    with pytest.raises(WorkspaceError, match="no checkpoint 99"):
        rollback(ws, 99)
    with pytest.raises(WorkspaceError, match="not a checkpoint"):
        rollback(ws, "HEAD~1; rm -rf /")


def test_checkpoints_survive_a_crash_and_the_workspace_is_found_again(repo: Path, tmp_path: Path) -> None:
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    (ws.path / "a.txt").write_text("a\n")
    checkpoint(ws, "one")
    # Another process (the next worker after a crash) finds the workspace and its checkpoints.
    code = (
        "from orchestrate.workspace import find_workspaces, list_checkpoints\n"
        "[ws] = find_workspaces(__import__('pathlib').Path(__import__('sys').argv[1]))\n"
        "print(ws.info.name, [c.label for c in list_checkpoints(ws)])\n"
    )
    import sys

    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "workspaces")], capture_output=True, text=True, timeout=30
    )
    assert out.stdout.strip() == "t ['one']", out.stderr
    assert [w.info.name for w in find_workspaces(tmp_path / "workspaces")] == ["t"]


def test_the_changes_as_a_commit_on_the_task_branch(repo: Path, tmp_path: Path) -> None:
    user = user_view(repo)
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    assert commit_changes(ws, "nothing yet") is None
    (ws.path / "feature.py").write_text("FEATURE = True\n")
    (ws.path / "README.md").unlink()
    commit = commit_changes(ws, "Add the feature\n\nMade by an agent.", author=("Ada", "ada@example.com"))
    assert commit is not None
    assert git(repo, "rev-parse", "orchestrate/t").strip() == commit
    assert (
        git(repo, "log", "-1", "--format=%an <%ae>|%s", commit).strip()
        == "Ada <ada@example.com>|Add the feature"
    )
    assert git(repo, "diff", "--name-status", "main", commit) == "D\tREADME.md\nA\tfeature.py\n"
    assert git(ws.path, "status", "--porcelain") == ""  # the worktree's index follows its branch
    assert task_changes(ws) != []  # still measured from the base
    assert user_view(repo) == user


# --- removal -------------------------------------------------------------------------------------


def test_removal_takes_the_worktree_checkpoints_and_an_unused_branch(repo: Path, tmp_path: Path) -> None:
    user = user_view(repo)
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    (ws.path / "x").write_text("x\n")
    checkpoint(ws, "one")
    assert git(repo, "for-each-ref", "refs/orchestrate")
    remove_workspace(ws)
    assert not ws.path.exists() and not ws.info.meta.exists()
    assert git(repo, "for-each-ref", "refs/orchestrate") == ""
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert user_view(repo) == user
    # A branch with the task's commit on it is the user's to merge: it stays.
    kept = create_workspace(repo, "k", "worktree", options(tmp_path))
    (kept.path / "y").write_text("y\n")
    commit = commit_changes(kept, "y")
    remove_workspace(kept)
    assert git(repo, "rev-parse", "orchestrate/k").strip() == commit
    with pytest.raises(WorkspaceError, match="no longer exists"):
        open_workspace(kept.info)


def test_a_workspace_in_use_is_never_removed(repo: Path, tmp_path: Path) -> None:
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom orchestrate.workspace import open_workspace, WorkspaceInfo\n"
            "ws = open_workspace(WorkspaceInfo.model_validate_json(sys.argv[1]))\n"
            "with ws.in_use():\n    print('held', flush=True)\n    sys.stdin.read()\n",
            ws.info.model_dump_json(),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(WorkspaceInUseError, match="a run is using it"):
            remove_workspace(ws)
        assert ws.path.is_dir()
    finally:
        holder.communicate("", timeout=10)
    remove_workspace(ws)  # free now
    assert not ws.path.exists()


# --- not a repository, plain copies ----------------------------------------------------------------


def test_a_directory_outside_git_gets_a_clear_error_or_a_plain_copy(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    (plain / "sub").mkdir(parents=True)
    (plain / "sub" / "notes.txt").write_text("notes\n")
    (plain / "tool").write_text("#!/bin/sh\n")
    (plain / "tool").chmod(0o755)
    with pytest.raises(NotAGitRepositoryError, match=r"not inside a git repository.*`copy`"):
        create_workspace(plain, "t", "worktree", options(tmp_path))
    ws = create_workspace(plain, "t", "copy", options(tmp_path))
    assert tree_state(ws.path) == tree_state(plain)
    start = checkpoint(ws, "start")
    (ws.path / "sub" / "notes.txt").write_text("changed\n")
    (ws.path / "added.txt").write_text("new\n")
    assert {(c.path, c.status) for c in task_changes(ws)} == {
        ("sub/notes.txt", "modified"),
        ("added.txt", "added"),
    }
    rollback(ws, start.id)
    assert tree_state(ws.path) == tree_state(plain)
    assert not (plain / ".git").exists() and (plain / "sub" / "notes.txt").read_text() == "notes\n"
    remove_workspace(ws)
    assert not ws.path.exists()


def test_a_copy_of_a_repository_takes_what_git_sees_and_the_globs(repo: Path, tmp_path: Path) -> None:
    (repo / "untracked.txt").write_text("u\n")
    ws = create_workspace(repo, "t", "copy", options(tmp_path))
    names = set(tree_state(ws.path))
    assert {"README.md", "src/app.py", "untracked.txt", ".env", ".env.local"} <= names
    assert "build" not in names and ".git" not in names
    assert task_changes(ws) == []


def test_the_root_must_be_outside_the_repository(repo: Path) -> None:
    with pytest.raises(WorkspaceError, match="must be outside"):
        create_workspace(repo, "t", "worktree", WorkspaceOptions(root=repo / "workspaces"))
    with pytest.raises(WorkspaceError, match="not a workspace name"):
        create_workspace(repo, "../escape", "worktree", WorkspaceOptions(root=repo.parent / "w"))


def test_a_name_taken_gets_a_suffix(repo: Path, tmp_path: Path) -> None:
    git(repo, "branch", "orchestrate/t")
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    assert ws.info.name == "t-2" and ws.info.branch == "orchestrate/t-2"


def test_a_change_in_the_same_second_as_the_last_snapshot_is_seen(repo: Path, tmp_path: Path) -> None:
    # Same size, same second: only git's "racy" check on the index's own mtime can tell.
    ws = create_workspace(repo, "t", "worktree", options(tmp_path))
    for n in range(20):
        before = checkpoint(ws, f"{n}")
        (ws.path / "src" / "app.py").write_text(f"print('hell{n % 10}')\n")
        after = checkpoint(ws, f"{n} after")
        assert before.tree != after.tree, f"the edit of round {n} was missed"
        (ws.path / "src" / "app.py").write_text("print('hello')\n")
