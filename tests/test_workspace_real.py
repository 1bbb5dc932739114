"""The real Claude Code CLI (pinned in clis/package.json) in a task's own worktree, through the engine,
against the scripted model server: the file it writes shows in the task's diff, and a rollback to
the checkpoint before its turn removes it.

Skipped when the CLI is not installed, unless ORCHESTRATE_REQUIRE_REAL_CLIS=1 (CI), which fails instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from orchestrate.approvals import AutoApprove
from orchestrate.engine import Engine
from orchestrate.testing import Scenario, ScriptedModelServer
from orchestrate.testing.offline import Scratch, claude_offline_env

from .helpers import CLI_BIN, FAST, needs_cli
from .test_workspace_layer import make_repo, user_view

CLAUDE = CLI_BIN / "claude"

pytestmark = [pytest.mark.anyio, pytest.mark.real_cli, needs_cli("claude")]


@pytest.fixture
def scratch() -> Iterator[Scratch]:
    with Scratch.create() as s:
        yield s


async def test_claude_in_a_worktree_diff_shows_its_file_and_rollback_removes_it(scratch: Scratch) -> None:
    assert CLAUDE.exists(), "the pinned Claude Code CLI is not installed (npm ci --prefix clis)"
    repo = await anyio.to_thread.run_sync(make_repo, scratch.work / "repo")
    user = await anyio.to_thread.run_sync(user_view, repo)
    steps = [
        {
            "text": "Writing the file.",
            "tool": {
                "name": "Bash",
                "input": {
                    "command": "printf 'made by claude\\n' > claude.txt",
                    "description": "Write a file",
                },
            },
        },
        {"text": "Done."},
    ]
    with ScriptedModelServer(Scenario.from_obj({"steps": steps})) as server:
        run_options = {
            "env": claude_offline_env(server, scratch),
            "timeout": 90,
            "workspace": "worktree",
            "workspace_options": {"root": str(scratch.root / "workspaces")},
        }
        engine = Engine.open(
            f"sqlite:///{scratch.root / 'store.db'}", approvals=AutoApprove(), poll=0.05, shutdown=FAST
        )
        async with engine, anyio.create_task_group() as tg:
            tg.start_soon(engine.work)
            task = await engine.submit(
                "write claude.txt",
                "claude-code",
                executor_options={"base_command": [str(CLAUDE)]},
                run_options=run_options,
                cwd=repo,
            )
            with anyio.fail_after(120):
                done = await engine.wait(task.id)
            engine.stop()
            assert done.status == "done", done.error
            assert done.workspace is not None
            worktree = Path(done.workspace["path"])
            [run] = await engine.runs(task.id)
            changes = await engine.diff(task.id)
            assert [(c.path, c.status) for c in changes] == [("claude.txt", "added")]
            assert "+made by claude\n" in changes[0].diff
            assert [c.path for c in await engine.diff(task.id, turn=1)] == ["claude.txt"]
            assert await anyio.Path(worktree / "claude.txt").read_text() == "made by claude\n"
            assert run.checkpoint_start is not None
            await engine.rollback(task.id, run.checkpoint_start)
            assert not await anyio.Path(worktree / "claude.txt").exists()
            assert await engine.diff(task.id) == []
            assert not await anyio.Path(repo / "claude.txt").exists()
    assert await anyio.to_thread.run_sync(user_view, repo) == user
