"""Workspaces through the engine: a task in its own worktree, checkpointed before the agent starts and
after every turn (a fake agent that writes, edits and deletes files over three turns), the checkpoints
each run started and ended on in the store and in its raw log; a failing setup fails the task with its
output; a directory outside git gets a clear error; the user's checkout never moves."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from orchestrate import Run, Task
from orchestrate.errors import ConfigError
from orchestrate.workspace import diff, list_checkpoints, open_workspace, rollback

from .helpers import FAKE_CLAUDE, fake_claude
from .test_engine import engine_on, url  # noqa: F401  (url: the shared fixture)
from .test_workspace_layer import make_repo, user_has_work_in_progress, user_view

pytestmark = pytest.mark.anyio

AGENT = textwrap.dedent(
    """
    import os, pathlib, sys
    state = pathlib.Path(os.environ["TURNS_STATE"])
    n = int(state.read_text()) if state.exists() else 0
    state.write_text(str(n + 1))
    here = pathlib.Path.cwd()
    (state.parent / f"env-{n}").write_text(os.environ.get("ORCHESTRATE_PORT", "") + " " + str(here))
    if n == 0:
        (here / "notes.md").write_text("turn one\\n")
        (here / "src" / "app.py").write_text("print('turn one')\\n")
    elif n == 1:
        (here / "notes.md").write_text("turn two\\n")
        (here / "README.md").unlink()
    elif n == 2:
        (here / "notes.md").unlink()
        (here / "src" / "extra.py").write_text("EXTRA = 3\\n")
    os.execv(sys.executable, [sys.executable, sys.argv[1], *sys.argv[2:]])
    """
)


def agent(tmp_path: Path) -> dict[str, Any]:
    """Executor options: the fake Claude, behind a script that changes files at each turn."""
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    (tmp_path / "state").mkdir()
    return {
        "base_command": [sys.executable, str(script), str(FAKE_CLAUDE)],
        "env": {"TURNS_STATE": str(tmp_path / "state" / "turns")},
    }


def last_record(raw_log: str | None) -> dict[str, Any]:
    assert raw_log
    record: dict[str, Any] = orjson.loads(Path(raw_log).read_bytes().splitlines()[-1])
    return record


def worktree(tmp_path: Path, **more: Any) -> dict[str, Any]:
    return {"workspace": "worktree", "workspace_options": {"root": str(tmp_path / "workspaces"), **more}}


async def test_a_task_in_its_worktree_checkpointed_at_every_turn(url: str, tmp_path: Path) -> None:  # noqa: F811
    repo = make_repo(tmp_path / "repo")
    user_has_work_in_progress(repo)
    user = user_view(repo)
    async with engine_on(url) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task = await engine.submit(
            "plain", "claude-code", executor_options=agent(tmp_path), run_options=worktree(tmp_path), cwd=repo
        )
        with anyio.fail_after(30):
            await engine.wait(task.id)
            for message in ("plain again", "plain once more"):
                await engine.send(task.id, message)
                done = await engine.wait(task.id)
        engine.stop()
    assert done.status == "done", done.error
    assert done.workspace is not None
    ws = open_workspace(done.workspace)
    runs = await engine.runs(task.id)
    assert [(r.checkpoint_start, r.checkpoint_end) for r in runs] == [(1, 2), (3, 4), (5, 6)]
    # The agent ran in the worktree, with its ports.
    port, cwd = (tmp_path / "state" / "env-0").read_text().split(" ")
    assert Path(cwd) == ws.path and port == str(ws.info.ports[0] if ws.info.ports else "")
    per_turn = [
        {(c.path, c.status) for c in diff(ws, r.checkpoint_start or 0, r.checkpoint_end or 0)} for r in runs
    ]
    assert per_turn == [
        {("notes.md", "added"), ("src/app.py", "modified")},
        {("notes.md", "modified"), ("README.md", "deleted")},
        {("notes.md", "deleted"), ("src/extra.py", "added")},
    ]
    # Nothing moves between turns: each turn starts where the last one ended.
    points = {c.id: c for c in list_checkpoints(ws)}
    assert points[2].tree == points[3].tree and points[4].tree == points[5].tree
    # The raw log of each run says its checkpoints, and so do the raw events in the store.
    for run in runs:
        event = last_record(run.raw_log)["event"]
        assert event["type"] == "checkpoint" and event["workspace"] == ws.info.name
        assert (event["start"]["id"], event["end"]["id"]) == (run.checkpoint_start, run.checkpoint_end)
        assert event["end"]["commit"] == points[run.checkpoint_end or 0].commit
    # "Roll back to before this turn": the second run's start.
    rollback(ws, runs[1].checkpoint_start or 0)
    assert (ws.path / "README.md").exists() and (ws.path / "notes.md").read_text() == "turn one\n"
    assert user_view(repo) == user


async def test_the_checkpoints_are_in_the_stored_raw_events(url: str, tmp_path: Path) -> None:  # noqa: F811
    repo = make_repo(tmp_path / "repo")
    async with engine_on(url) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task = await engine.submit(
            "plain", "claude-code", executor_options=agent(tmp_path), run_options=worktree(tmp_path), cwd=repo
        )
        with anyio.fail_after(30):
            done = await engine.wait(task.id)
        engine.stop()
        events = [e async for e in engine.subscribe(task.id, follow=False)]
    raw = [e.data["event"] for e in events if e.kind == "raw" and e.data.get("type") == "event"]
    [mark] = [r for r in raw if r.get("type") == "checkpoint"]
    [run] = await engine.runs(done.id)
    assert (mark["start"]["id"], mark["end"]["id"]) == (run.checkpoint_start, run.checkpoint_end) == (1, 2)


async def test_a_failing_setup_fails_the_task_with_its_output(url: str, tmp_path: Path) -> None:  # noqa: F811
    repo = make_repo(tmp_path / "repo")
    setup = "echo resolving dependencies; echo 'error: lockfile is out of date' >&2; exit 3"
    async with engine_on(url) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task = await engine.submit(
            "plain",
            "claude-code",
            executor_options=agent(tmp_path),
            run_options=worktree(tmp_path, setup=setup),
            cwd=repo,
        )
        with anyio.fail_after(30):
            done = await engine.wait(task.id)
        engine.stop()
    assert done.status == "failed" and done.error_code == "setup_failed"
    assert done.error and "exited with code 3" in done.error and "lockfile is out of date" in done.error
    assert done.workspace and done.workspace["setup"]["exit_code"] == 3
    assert "resolving dependencies" in done.workspace["setup"]["output"]
    assert not (tmp_path / "state" / "turns").exists()  # the agent never started


async def test_a_worktree_of_a_directory_outside_git_fails_clearly(url: str, tmp_path: Path) -> None:  # noqa: F811
    plain = tmp_path / "plain"
    plain.mkdir()
    async with engine_on(url) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        task = await engine.submit(
            "plain",
            "claude-code",
            executor_options=agent(tmp_path),
            run_options=worktree(tmp_path),
            cwd=plain,
        )
        with anyio.fail_after(30):
            done = await engine.wait(task.id)
        engine.stop()
    assert done.status == "failed" and done.error_code == "not_a_git_repository"
    assert done.error and "not inside a git repository" in done.error and done.workspace is None


def test_a_bare_run_refuses_a_workspace_it_cannot_make(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"a Run works in task\.cwd as given"):
        Run(fake_claude(), Task(prompt="x", cwd=tmp_path, workspace="worktree"))
