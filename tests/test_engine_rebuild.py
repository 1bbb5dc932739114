"""Entries rebuilt from the raw log, the source of truth: the same as the patches stored live, from the
raw log file or, when it is gone, from the raw records mirrored into the store; `show --rebuild`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from click.testing import CliRunner

from orchestrate.approvals import AutoApprove
from orchestrate.cli.main import main
from orchestrate.engine import Engine
from orchestrate.entries import PATCH_ADAPTER

from .helpers import FAKE_CLAUDE, FAST

pytestmark = pytest.mark.anyio

FAKE = {"base_command": [sys.executable, str(FAKE_CLAUDE)]}


def dumped(entries: list[Any]) -> list[Any]:
    return [orjson.loads(e.model_dump_json(by_alias=True, exclude_none=True)) for e in entries]


def show(url: str, task_id: int, *flags: str) -> Any:
    done = CliRunner().invoke(main, ["show", str(task_id), "--store", url, "--json", *flags])
    assert done.exit_code == 0, done.output
    return orjson.loads(done.output)


async def test_entries_rebuilt_from_the_raw_log_match_the_stored_ones(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    async with (
        Engine.open(
            url, poll=0.05, shutdown=FAST, approvals=AutoApprove(), log_dir=tmp_path / "runs"
        ) as engine,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(engine.work)
        task = await engine.submit("tool", "claude-code", executor_options=FAKE, cwd=tmp_path)
        never = await engine.submit("plain", "no-such-agent", cwd=tmp_path)
        with anyio.fail_after(20):
            assert (await engine.wait(task.id)).status == "done"
            assert (await engine.wait(never.id)).status == "failed"
        engine.stop()
    [run] = await engine.runs(task.id)
    stored: dict[int, Any] = {}
    async for e in engine.subscribe(run_id=run.id, follow=False):
        if e.kind == "patch":
            patch = PATCH_ADAPTER.validate_python(e.data)
            stored[patch.index] = patch.entry
    assert any("ran: echo original" in str(e) for e in stored.values())  # a tool call with its output

    from_file = await engine.rebuild(run.id)
    assert dumped(from_file) == dumped([stored[i] for i in sorted(stored)])
    assert show(url, task.id, "--rebuild")["runs"][0]["entries"] == show(url, task.id)["runs"][0]["entries"]

    # The raw log file is gone (another machine, cleaned up): the raw records the store holds suffice.
    assert run.raw_log
    Path(run.raw_log).unlink()  # noqa: ASYNC240 (a test's set-up)
    assert dumped(await engine.rebuild(run.id)) == dumped(from_file)
    [never_ran] = await engine.runs(never.id)
    assert await engine.rebuild(never_ran.id) == []
