"""Token usage and cost summed per run and per task, from every agent that reports them: one task per
agent protocol (Claude's stream-json, Codex's app-server, ACP, Cursor's stream-json), each with a
follow-up turn, so the task's sums are over two runs (and the turn resumes each agent's session)."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from .helpers import FAKE_ACP, FAKE_CLAUDE, FAKE_CODEX, FAKE_CURSOR
from .test_engine import engine_on, url  # noqa: F401  (url: the shared fixture)

pytestmark = pytest.mark.anyio

# executor, fake, prompt, what one run reports: (input, output, cache read, cost in USD or None)
AGENTS = [
    ("claude-code", FAKE_CLAUDE, "plain", (10, 5, 2, 0.001)),
    ("codex", FAKE_CODEX, "plain", (100, 50, 10, None)),
    ("acp", FAKE_ACP, "usage", (10, 5, 2, 0.25)),
    ("cursor", FAKE_CURSOR, "plain", (120, 30, 40, None)),
]


async def test_usage_and_cost_are_summed_per_run_and_per_task_for_every_agent(
    url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    async with engine_on(url, capacity=4) as engine, anyio.create_task_group() as tg:
        tg.start_soon(engine.work)
        ids = {}
        for name, fake, prompt, _ in AGENTS:
            options = {"base_command": [sys.executable, str(fake)]}
            ids[name] = (await engine.submit(prompt, name, executor_options=options, cwd=tmp_path)).id
        with anyio.fail_after(60):
            for name, *_ in AGENTS:
                assert (await engine.wait(ids[name])).status == "done", name
            for name, _, prompt, _ in AGENTS:
                await engine.send(ids[name], prompt)  # a second turn, resuming the session
            tasks = {name: await engine.wait(ids[name]) for name, *_ in AGENTS}
        engine.stop()
        runs = {name: await engine.runs(ids[name]) for name, *_ in AGENTS}
    for name, _, _, (tokens_in, tokens_out, cached, cost) in AGENTS:
        task, task_runs = tasks[name], runs[name]
        assert task.status == "done" and len(task_runs) == 2, (name, task, task_runs)
        for run in task_runs:
            got = (run.input_tokens, run.output_tokens, run.cache_read_tokens)
            assert got == (tokens_in, tokens_out, cached), (name, run)
            assert run.cost_usd == (pytest.approx(cost) if cost is not None else None), (name, run)
        # The second turn resumed the first's session (Claude --resume, Codex thread/resume, ACP
        # session/load, Cursor --resume): no continuity notice, the same session.
        first, second = task_runs
        assert second.resume_token == first.session_id == second.session_id and first.session_id, name
        assert task.notice is None, (name, task.notice)
        summed = (task.input_tokens, task.output_tokens, task.cache_read_tokens)
        assert summed == (2 * tokens_in, 2 * tokens_out, 2 * cached), (name, task)
        assert task.cost_usd == (pytest.approx(2 * cost) if cost is not None else None), (name, task)
