"""The workspace commands as a user runs them: `run --worktree` (a real process, the fake agent),
then `diff`, `diff --turn`, `checkpoints`, `rollback --to`, `workspace commit`, `workspace clean`;
`submit --worktree` storing what a worker needs; bad input refused with a clear message."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import orjson
from click.testing import CliRunner

from orchestrate.cli.main import main
from orchestrate.store import Store

from .helpers import FAKE_CLAUDE
from .test_cli_tasks import orchestrate
from .test_workspace_engine import AGENT
from .test_workspace_layer import git, make_repo, user_view


def invoke(*args: str, code: int = 0) -> str:
    done = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert done.exit_code == code, done.output
    return done.output


def test_run_in_a_worktree_then_diff_checkpoints_rollback_commit_clean(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    user = user_view(repo)
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    command = " ".join(shlex.quote(p) for p in (sys.executable, str(script), str(FAKE_CLAUDE)))
    root = tmp_path / "workspaces"
    done = orchestrate(
        "run", "-e", "claude-code", "--command", command, "--approvals", "auto", "--output", "jsonl",
        "--env", f"TURNS_STATE={tmp_path / 'turns'}", "--cwd", str(repo),
        "--worktree", "--workspace-root", str(root), "--setup", "echo set up > .setup-ran",
        "plain",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = orjson.loads(done.stdout.splitlines()[-1])
    task = str(result["taskId"])
    assert "workspace: " in done.stderr and "3 file(s) changed" in done.stderr, done.stderr
    stat = invoke("diff", task, "--stat")
    assert stat.splitlines() == ["A +1 -0\t.setup-ran", "A +1 -0\tnotes.md", "M +1 -1\tsrc/app.py"]
    # The turn alone: the setup's file was there before the agent started.
    turn = invoke("diff", task, "--turn", "1")
    assert "+++ b/notes.md\n@@ -0,0 +1 @@\n+turn one\n" in turn and ".setup-ran" not in turn
    assert "-print('hello')\n+print('turn one')\n" in turn
    listed = orjson.loads(invoke("checkpoints", task, "--json"))
    assert [(c["id"], c["turn"]) for c in listed] == [(1, "turn 1 start (run 1)"), (2, "turn 1 end (run 1)")]
    # The raw log ends with the turn's checkpoints.
    last = orjson.loads(Path(result["rawLog"]).read_bytes().splitlines()[-1])
    assert (last["event"]["start"]["id"], last["event"]["end"]["id"]) == (1, 2)
    with Store.open() as store:
        info = store.get(int(task)).workspace
    assert info is not None
    path = Path(info["path"])
    assert path.is_relative_to(root) and (path / "notes.md").read_text() == "turn one\n"
    assert "rolled back to checkpoint 1" in invoke("rollback", task, "--to", "1")
    assert not (path / "notes.md").exists() and (path / ".setup-ran").exists()
    assert invoke("diff", task, "--from", "1", "--to", "now") == ""
    invoke("rollback", task, "--to", "3")  # the checkpoint the rollback took: undone
    assert (path / "notes.md").read_text() == "turn one\n"
    assert "no checkpoint 99" in invoke("rollback", task, "--to", "99", code=2)
    out = invoke("workspace", "commit", task, "-m", "Turn one's work", "--author", "Ada <ada@example.com>")
    assert f"on branch {info['branch']}" in out
    assert git(repo, "log", "-1", "--format=%an|%s", info["branch"]).strip() == "Ada|Turn one's work"
    assert task in invoke("workspace", "list")
    assert f"workspace: {path} (branch {info['branch']})" in invoke("show", task)
    assert "would remove" in invoke("workspace", "clean", "--dry-run") and path.exists()
    assert f"task {task}: removed" in invoke("workspace", "clean")
    assert not path.exists() and git(repo, "for-each-ref", "refs/orchestrate") == ""
    assert git(repo, "rev-parse", "--verify", "--quiet", info["branch"], check=False).strip()  # has a commit
    assert "has no workspace" in invoke("diff", task, code=1)
    assert user_view(repo) == user


def test_submit_with_a_worktree_stores_what_the_worker_needs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    done = orchestrate(
        "submit", "-e", "claude-code", "--cwd", str(repo), "--worktree", "--base", "main",
        "--setup", "npm ci", "--copy-glob", ".env", "--copy-glob", "config/*.local", "--keep-workspace",
        "do it",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with Store.open() as store:
        task = store.get(int(done.stdout))
    assert task.run_options == {
        "approval_timeout": 600.0,
        "workspace": "worktree",
        "workspace_options": {
            "base": "main",
            "setup": "npm ci",
            "copy_globs": [".env", "config/*.local"],
            "keep": True,
        },
    }


def test_workspace_options_without_a_workspace_are_refused(tmp_path: Path) -> None:
    done = CliRunner().invoke(
        main, ["submit", "-e", "claude-code", "--cwd", str(tmp_path), "--setup", "make", "x"]
    )
    assert done.exit_code == 2 and "go with --worktree or --copy" in done.output
