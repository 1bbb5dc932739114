"""One real Claude Code task (the CLI from npm) through Temporal: submitted to the store, its workflow
started by a worker, its turn run as an activity against the scripted model server, its Bash call
approved from this process through the store."""

from __future__ import annotations

import time

import pytest

from orchestrate.store import TaskSpec
from orchestrate.testing import Scenario, ScriptedModelServer
from orchestrate.testing.offline import Scratch, claude_offline_env

from .helpers import CLI_BIN, needs_cli
from .temporal_cluster import Cluster, workflow_states

CLAUDE = CLI_BIN / "claude"

pytestmark = [pytest.mark.real_cli, needs_cli("claude")]


def test_a_claude_code_task_runs_through_temporal(cluster: Cluster) -> None:
    assert CLAUDE.exists(), "the pinned Claude Code CLI is not installed (npm install --prefix clis)"
    steps = [
        {
            "text": "Running it.",
            "tool": {
                "name": "Bash",
                "input": {"command": "touch made.txt && echo created", "description": "Create a file"},
            },
        },
        {"text": "Result: {tool_result}"},
    ]
    with Scratch.create() as scratch, ScriptedModelServer(Scenario.from_obj({"steps": steps})) as server:
        cluster.start("one")
        task = cluster.store.submit(
            TaskSpec(
                prompt="make the file",
                executor="claude-code",
                executor_options={"base_command": [str(CLAUDE)]},
                run_options={"env": claude_offline_env(server, scratch), "timeout": 90},
                cwd=scratch.work,
            )
        )
        deadline = time.monotonic() + 90
        while not (waiting := cluster.store.approvals(task_id=task.id)):
            assert time.monotonic() < deadline, cluster.log("one")
            assert not cluster.store.get(task.id).finished, cluster.store.get(task.id)
            time.sleep(0.1)
        [approval] = waiting
        assert approval.request["tool_name"] == "Bash"
        won, _ = cluster.store.answer_approval(approval.id, "approved", by="the test")
        assert won
        cluster.wait([task.id], 90)
        done = cluster.store.get(task.id)
        assert done.status == "done", (done, cluster.log("one"))
        assert (scratch.work / "made.txt").exists()
        [run] = cluster.store.runs(task.id)
        assert run.session_id and run.outcome == "success" and run.output_tokens > 0
        events = cluster.store.events(task_id=task.id, limit=100_000)
        assert any(e.kind == "patch" and "Result: created" in str(e.data) for e in events)
        assert any(e.kind == "raw" for e in events)  # the raw log went to the store, out of band
        assert workflow_states(cluster, [task.id]) == {"COMPLETED"}
