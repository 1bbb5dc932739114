"""A task's workspace around its runs: made (or found again) before a run, set up once, held while the
agent works in it, and checkpointed before the agent starts and when its turn ends; which checkpoints
a turn started and ended on goes to the store and to the run's raw log."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson

from ..store import Store, StoreError
from ..task import Task
from ..workspace import (
    Checkpoint,
    FileChange,
    Workspace,
    WorkspaceError,
    WorkspaceInUseError,
    checkpoint,
    create_workspace,
    diff,
    open_workspace,
    remove_workspace,
    rollback,
    run_setup,
)

__all__ = [
    "TurnCheckpoints",
    "in_workspace",
    "prepare_workspace",
    "record_checkpoints",
    "remove_task_workspace",
    "rollback_task",
    "task_diff",
    "task_workspace",
    "turn_checkpoints",
]

LIVE_TASK = ("running", "waiting_approval")


async def prepare_workspace(
    store: Store | None,
    task_id: int | None,
    record: dict[str, Any] | None,
    spec: Task,
    name: str | None = None,
) -> Workspace | None:
    """The task's workspace (None for ``workspace="here"``): the recorded one, or a new one made from
    ``spec.cwd`` (recorded at once, so a crash leaves no workspace the store does not know); its setup
    command run if it has not succeeded yet.  Raises WorkspaceError (SetupFailedError) otherwise."""
    if spec.workspace == "here":
        return None

    def make() -> Workspace:
        if record:
            ws = open_workspace(record)
        else:
            called = name or f"task-{task_id}"
            ws = create_workspace(spec.cwd, called, spec.workspace, spec.workspace_options)
            _save(store, task_id, ws)
        options = spec.workspace_options
        if options.setup and (ws.info.setup is None or not ws.info.setup.ok):
            try:
                run_setup(ws, options.setup, options.setup_timeout, env=spec.env)
            finally:
                _save(store, task_id, ws)  # the output is kept with the task, failed or not
        return ws

    return await anyio.to_thread.run_sync(make)


def _save(store: Store | None, task_id: int | None, ws: Workspace) -> None:
    if store is not None and task_id is not None:
        store.set_workspace(task_id, ws.info.model_dump(mode="json"))


def in_workspace(spec: Task, ws: Workspace) -> Task:
    """``spec`` to run in ``ws``: its directory, its ports in the environment (the task's own
    overrides still last), and nothing more to prepare."""
    return spec.model_copy(update={"cwd": ws.path, "env": ws.env() | spec.env, "workspace": "here"})


@dataclass
class TurnCheckpoints:
    """The checkpoints of one run's turn."""

    ws: Workspace
    run_id: int | None
    start: Checkpoint | None = None
    end: Checkpoint | None = None

    async def before(self, store: Store | None) -> Checkpoint:
        self.start = await anyio.to_thread.run_sync(
            checkpoint, self.ws, f"run {self.run_id}: before the agent"
        )
        await _store(store, self.run_id, start=self.start.id)
        return self.start

    async def after(self, store: Store | None, raw_log: Path | None) -> Checkpoint:
        self.end = await anyio.to_thread.run_sync(checkpoint, self.ws, f"run {self.run_id}: after the turn")
        await _store(store, self.run_id, end=self.end.id)
        if raw_log is not None:
            await anyio.to_thread.run_sync(record_checkpoints, raw_log, self)
        return self.end


async def _store(store: Store | None, run_id: int | None, **ids: int) -> None:
    if store is not None and run_id is not None:
        with contextlib.suppress(StoreError):  # the raw log and the refs have it too
            await anyio.to_thread.run_sync(lambda: store.set_checkpoints(run_id, **ids))


def record_checkpoints(raw_log: Path, turn: TurnCheckpoints) -> None:
    """Append the turn's checkpoints to the run's raw log (after the agent's last record): a client
    event, which normalizers pass over and a board reads back."""
    event: dict[str, Any] = {"type": "checkpoint", "workspace": turn.ws.info.name, "path": str(turn.ws.path)}
    for key, point in (("start", turn.start), ("end", turn.end)):
        if point is not None:
            event[key] = {"id": point.id, "commit": point.commit, "label": point.label}
    line = orjson.dumps({"type": "event", "ts": time.time(), "event": event}) + b"\n"
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(OSError):  # no log (it could not be written): the store has them
        fd = os.open(raw_log, flags)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


# --- a task's workspace, for the commands and the API (blocking: async callers use a thread) ---------


def task_workspace(store: Store, task_id: int) -> Workspace:
    """The workspace made for task ``task_id``; WorkspaceError if it has none (or it was removed)."""
    task = store.get(task_id)
    if not task.workspace:
        raise WorkspaceError(f"task {task_id} has no workspace (it ran in {task.cwd})")
    return open_workspace(task.workspace)


def turn_checkpoints(store: Store, task_id: int, turn: int) -> tuple[int, int]:
    """The checkpoints run ``turn`` (1 = the task's first run) started and ended on."""
    runs = store.runs(task_id)
    if not 1 <= turn <= len(runs):
        raise WorkspaceError(f"task {task_id} has {len(runs)} run(s); there is no turn {turn}")
    run = runs[turn - 1]
    if run.checkpoint_start is None or run.checkpoint_end is None:
        raise WorkspaceError(
            f"run {run.id} (turn {turn}) of task {task_id} has no checkpoints (it did not finish?)"
        )
    return run.checkpoint_start, run.checkpoint_end


def task_diff(
    store: Store, task_id: int, start: str | int = "base", end: str | int = "now", turn: int | None = None
) -> list[FileChange]:
    """Per-file changes of a task: from ``start`` to ``end`` (checkpoint numbers, ``base``, ``now``),
    or what turn ``turn`` changed."""
    ws = task_workspace(store, task_id)
    if turn is not None:
        start, end = turn_checkpoints(store, task_id, turn)
    return diff(ws, start, end)


def rollback_task(store: Store, task_id: int, to: str | int) -> Checkpoint:
    """Put the task's files back as checkpoint ``to`` had them (refused while a run works there);
    returns the checkpoint of the files as they were."""
    task = store.get(task_id)
    if task.status in LIVE_TASK:
        raise WorkspaceInUseError(f"task {task_id} is {task.status}: cancel it (or let it end) first")
    ws = task_workspace(store, task_id)
    with ws.exclusive():
        return rollback(ws, to)


def remove_task_workspace(store: Store, task_id: int, *, delete_branch: bool | None = None) -> Workspace:
    """Remove the task's workspace (refused while a run uses it) and forget it in the store."""
    task = store.get(task_id)
    if task.status in LIVE_TASK:
        raise WorkspaceInUseError(f"task {task_id} is {task.status}: its workspace is in use")
    ws = task_workspace(store, task_id)
    remove_workspace(ws, delete_branch=delete_branch)
    store.set_workspace(task_id, None)
    return ws
