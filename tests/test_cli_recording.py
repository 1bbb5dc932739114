"""`orchestrate run` recorded with the store opened beside the run (orchestrate/cli/recording.py):
what comes before the store is open is kept (within a bound) and stored in order, a store that
cannot open loses the run nothing, and the thread waits for the agent's first entry."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from orchestrate.cli import recording as recording_module
from orchestrate.cli.recording import Recording
from orchestrate.entries import AssistantMessage, EntryPatch, NormalizedEntry
from orchestrate.executors.base import ExecutorOptions
from orchestrate.run import Run
from orchestrate.store import Store
from orchestrate.task import Task


def patch(i: int) -> EntryPatch:
    return EntryPatch(
        op="add", index=i, entry=NormalizedEntry(index=i, type=AssistantMessage(), content=f"#{i}")
    )


def stand_in_run(tmp_path: Path) -> Run:
    """What the recorder reads of a run: its task, pids and raw log path (none kept here)."""
    return cast("Run", SimpleNamespace(task=Task(prompt="p", cwd=tmp_path), pids=[], raw_log_path=None))


def stored_patches(task_id: int) -> list[Any]:
    with Store.open() as store:
        return [e.data for e in store.events(task_id=task_id, after=0, limit=100) if e.kind == "patch"]


def test_patches_before_the_store_opens_are_stored_in_order(tmp_path: Path) -> None:
    shown: list[EntryPatch] = []
    rec = Recording()
    sink = rec.sink(shown.append)
    rec.open("claude-code", ExecutorOptions(), stand_in_run(tmp_path), None)
    sink(patch(0))  # the run's own prompt: the store still waits
    assert rec._opener is not None and rec._opener.is_alive() and not rec._go.is_set()
    sink(patch(1))  # the agent's first entry: now it opens
    assert rec._go.is_set()
    rec._opener.join(30)
    sink(patch(2))
    ids = rec.ids
    assert ids is not None and rec.problem is None
    rec.finish(None)
    assert [p.index for p in shown] == [0, 1, 2]
    assert [p["entry"]["content"] for p in stored_patches(ids["taskId"])] == ["#0", "#1", "#2"]


def test_the_early_list_is_bounded_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording_module, "_MAX_EARLY", 2)
    rec = Recording()
    sink = rec.sink(lambda p: None)
    for i in range(3):
        sink(patch(i))  # nothing opens the store yet: all three are early
    assert rec.problem is not None and "raw log" in rec.problem
    rec.open("claude-code", ExecutorOptions(), stand_in_run(tmp_path), None)
    ids = rec.ids  # ends the wait for a first entry and joins the opener
    assert ids is not None
    rec.finish(None)
    assert [p["entry"]["content"] for p in stored_patches(ids["taskId"])] == ["#0", "#1"]


def test_a_store_that_cannot_open_costs_the_run_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    shown: list[EntryPatch] = []
    rec = Recording()
    sink = rec.sink(shown.append)
    rec.open("claude-code", ExecutorOptions(), stand_in_run(tmp_path), f"sqlite:///{blocker}/store.db")
    for i in range(3):
        sink(patch(i))
    assert rec.ids is None
    rec.finish(None)
    assert len(shown) == 3
    assert rec.problem is not None and "not recorded in the store" in rec.problem


def test_the_recorder_loads_the_store_and_not_the_engine() -> None:
    # The recorder opens on a thread while the agent starts (before its first entry, for an agent
    # slow to say anything): the engine's queue, runner and workspaces would cost that start ~150 ms
    # more CPU than the store itself and are never used by it.
    probe = (
        "import sys, orchestrate.engine.record as r; "
        "assert r.RunRecorder; import orchestrate.engine as e; "
        "print(sorted(m for m in sys.modules if m.startswith('orchestrate.engine')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(ast.literal_eval(done.stdout))
    assert {"orchestrate.engine.record", "orchestrate.engine.ends"} <= loaded
    assert loaded.isdisjoint(
        {"orchestrate.engine.engine", "orchestrate.engine.runner", "orchestrate.engine.workspaces"}
    ), loaded
    # and the package's names still come when asked for
    names = "import orchestrate.engine as e; print(e.Engine.__module__, e.Watchdogs.__module__)"
    done = subprocess.run([sys.executable, "-c", names], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["orchestrate.engine.engine", "orchestrate.engine.runner"], done.stderr


def test_the_recorder_opens_the_store_without_sqlalchemys_orm(tmp_path: Path) -> None:
    # The store is SQLAlchemy Core; its ORM (~200 M instructions, ~50 ms of CPU at every run's
    # recording) came with one `aliased` of the queue's query, which Core's alias does the same.
    probe = (
        "import sys\n"
        "from orchestrate.store.store import Store\n"
        f"store = Store.open('sqlite:///{tmp_path / 'store.db'}')\n"
        "store.close()\n"
        "print(sorted(m for m in sys.modules if m.startswith('sqlalchemy.orm')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert ast.literal_eval(done.stdout) == []


# An agent busy starting up: it waits while two processes it started burn CPU (its tree's time is
# what counts, not its own).
BUSY = [
    sys.executable,
    "-c",
    "import os, time\nfor _ in range(2):\n    os.fork() or exec('while True: pass')\ntime.sleep(600)",
]


@pytest.fixture
def quick_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording_module, "_FIRST_WAIT", 0.2)
    monkeypatch.setattr(recording_module, "_BUSY_WAIT", 60.0)


def agent_run(tmp_path: Path, argv: list[str]) -> tuple[Run, subprocess.Popen[bytes]]:
    agent = subprocess.Popen(argv, start_new_session=True)
    run = stand_in_run(tmp_path)
    run.pids.append(agent.pid)
    return run, agent


def end(agent: subprocess.Popen[bytes]) -> None:
    os.killpg(agent.pid, signal.SIGKILL)
    agent.wait(10)


def opened_within(rec: Recording, seconds: float) -> bool:
    assert rec._opener is not None
    rec._opener.join(seconds)
    return not rec._opener.is_alive() and rec._recorder is not None


@pytest.mark.usefixtures("quick_waits")
def test_the_store_waits_while_the_agent_is_busy_starting_up(tmp_path: Path) -> None:
    """No first entry, past the first wait, and the agent's processes burn CPU: the store's opening
    would take a core from them.  Once they stop (stopped by a signal here: its start is over), it
    opens; and its first entry opens it at once."""
    run, agent = agent_run(tmp_path, BUSY)
    try:
        rec = Recording()
        sink = rec.sink(lambda p: None)
        rec.open("claude-code", ExecutorOptions(), run, None)
        sink(patch(0))  # the run's own prompt
        assert not opened_within(rec, 2.0), "opened while the agent was busy"
        os.killpg(agent.pid, signal.SIGSTOP)  # its start-up is over: it waits
        assert opened_within(rec, 30), "not opened once the agent was idle"
        assert not rec._go.is_set()
        ids = rec.ids
        assert ids is not None
        rec.finish(None)
    finally:
        end(agent)


@pytest.mark.usefixtures("quick_waits")
def test_a_busy_agents_first_entry_opens_the_store_at_once(tmp_path: Path) -> None:
    run, agent = agent_run(tmp_path, BUSY)
    try:
        rec = Recording()
        sink = rec.sink(lambda p: None)
        rec.open("claude-code", ExecutorOptions(), run, None)
        sink(patch(0))
        assert not opened_within(rec, 1.0)
        sink(patch(1))  # the agent's first entry
        assert opened_within(rec, 30)
        rec.finish(None)
    finally:
        end(agent)


def opens_without_a_first_entry(run: Run) -> None:
    """The store opens for ``run`` though only the run's own prompt came (no first entry)."""
    rec = Recording()
    rec.sink(lambda p: None)(patch(0))
    rec.open("claude-code", ExecutorOptions(), run, None)
    assert opened_within(rec, 30)
    assert not rec._go.is_set()
    rec.finish(None)


@pytest.mark.usefixtures("quick_waits")
def test_an_idle_agent_gets_the_store_opened_after_the_first_wait(tmp_path: Path) -> None:
    run, agent = agent_run(tmp_path, ["sleep", "60"])
    try:
        opens_without_a_first_entry(run)
    finally:
        end(agent)


def test_a_busy_agent_waits_the_store_no_longer_than_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recording_module, "_FIRST_WAIT", 0.2)
    monkeypatch.setattr(recording_module, "_BUSY_WAIT", 1.0)
    run, agent = agent_run(tmp_path, BUSY)
    try:
        opens_without_a_first_entry(run)
    finally:
        end(agent)
