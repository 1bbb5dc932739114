"""The workspace commands: ``diff``, ``checkpoints``, ``rollback`` and ``workspace`` (``list``,
``commit``, ``clean``); and the workspace of an ``orchestrate run --worktree``.  Loaded only when one
of them is asked for (they import the store, the engine and the workspace layer).

Exit codes: 0 success, 1 the workspace or the store failed (a rollback refused while the task runs
included), 2 usage error (no such task, no such checkpoint)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..engine.workspaces import (
    TurnCheckpoints,
    in_workspace,
    prepare_workspace,
    record_checkpoints,
    remove_task_workspace,
    rollback_task,
    task_diff,
    task_workspace,
)
from ..errors import OrchestrateError
from ..store import TERMINAL, NotFoundError, Store
from ..task import Task
from ..workspace import (
    FileChange,
    Workspace,
    WorkspaceError,
    checkpoint,
    commit_changes,
    list_checkpoints,
    task_changes,
)
from .tasks import TaskCliError, _echo_json, _store, json_option, store_option

__all__ = ["RunWorkspace", "register"]


# --- `orchestrate run --worktree` ----------------------------------------------------------------


@dataclass
class RunWorkspace:
    """The workspace of one ``orchestrate run``: made and set up before the agent, checkpointed
    before and after its turn, held meanwhile."""

    ws: Workspace
    task: Task
    turn: TurnCheckpoints
    held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @classmethod
    def prepare(cls, task: Task) -> RunWorkspace:
        """Raises WorkspaceError (a failing setup with its output) before anything runs."""
        name = f"run-{datetime.now():%Y%m%d-%H%M%S}"
        ws = anyio.run(prepare_workspace, None, None, None, task, name)
        assert ws is not None
        made = cls(ws, in_workspace(task, ws), TurnCheckpoints(ws, None))
        made.held.enter_context(ws.in_use())
        made.turn.start = checkpoint(ws, "before the agent")
        _say(f"workspace: {ws.path} (branch {ws.info.branch}); checkpoint {made.turn.start.id} taken")
        return made

    def finish(self, recording: Any, raw_log: Path | None) -> None:
        """Checkpoint the turn's end, note both checkpoints in the raw log and the store, and say
        where the changes are."""
        try:
            self.turn.end = checkpoint(self.ws, "after the turn")
            if raw_log is not None:
                record_checkpoints(raw_log, self.turn)
            start = self.turn.start.id if self.turn.start else None
            recording.record_workspace(self.ws.info.model_dump(mode="json"), start, self.turn.end.id)
            changed = len(task_changes(self.ws))
            ids = recording.ids or {}
            where = (
                f"`orchestrate diff {ids['taskId']}`" if "taskId" in ids else f"git -C {self.ws.path} diff"
            )
            _say(f"workspace: {changed} file(s) changed in {self.ws.path}; see {where}")
        except OrchestrateError as exc:
            _say(f"workspace: no checkpoint after the turn ({exc})")
        finally:
            self.held.close()


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        click.echo(f"orchestrate: {text}", err=True)


@contextlib.contextmanager
def _workspace_errors() -> Iterator[None]:
    try:
        yield
    except NotFoundError as exc:
        raise TaskCliError(str(exc), 2) from exc
    except WorkspaceError as exc:
        usage = "no checkpoint" in str(exc) or "not a checkpoint" in str(exc) or "no turn" in str(exc)
        raise TaskCliError(str(exc), 2 if usage else 1) from exc
    except OrchestrateError as exc:
        raise TaskCliError(str(exc), 1) from exc


# --- diff, checkpoints, rollback --------------------------------------------------------------------


@click.command(name="diff")
@click.argument("task_id", type=int, metavar="TASK")
@click.option("--turn", type=click.IntRange(1), help="Only what the task's Nth run (its turn) changed.")
@click.option(
    "--from", "start", default="base", show_default=True, help="A checkpoint number, base, or a commit."
)
@click.option(
    "--to", "end", default="now", show_default=True, help="A checkpoint number, now, base, or a commit."
)
@click.option("--stat", is_flag=True, help="One line per file: status, +added -deleted, path.")
@store_option
@json_option
def diff_command(
    task_id: int, turn: int | None, start: str, end: str, stat: bool, url: str | None, as_json: bool
) -> None:
    """What TASK changed in its workspace, as unified diffs per file: everything since it started
    (default), between two checkpoints, or in one turn."""
    with _store(url) as store, _workspace_errors():
        changes = task_diff(store, task_id, start, end, turn)
    if as_json:
        _echo_json([c.model_dump(mode="json") for c in changes])
    elif stat:
        for c in changes:
            click.echo(f"{c.status[0].upper()} +{c.additions} -{c.deletions}\t{c.path}")
    else:
        for c in changes:
            click.echo(_shown(c), nl=False)


def _shown(change: FileChange) -> str:
    text = change.diff if change.diff.endswith("\n") else change.diff + "\n"
    return text + ("[diff cut: the file's change is too large to show whole]\n" if change.truncated else "")


@click.command()
@click.argument("task_id", type=int, metavar="TASK")
@store_option
@json_option
def checkpoints(task_id: int, url: str | None, as_json: bool) -> None:
    """TASK's checkpoints, oldest first, with the turn each was taken around."""
    with _store(url) as store, _workspace_errors():
        found = list_checkpoints(task_workspace(store, task_id))
        turns: dict[int, str] = {}
        for n, run in enumerate(store.runs(task_id), start=1):
            if run.checkpoint_start is not None:
                turns[run.checkpoint_start] = f"turn {n} start (run {run.id})"
            if run.checkpoint_end is not None:
                turns[run.checkpoint_end] = f"turn {n} end (run {run.id})"
    if as_json:
        _echo_json([c.model_dump(mode="json") | {"turn": turns.get(c.id)} for c in found])
        return
    table = Table("id", "age", "turn", "commit", "label", box=None, pad_edge=False)
    now = time.time()
    for c in found:
        age = (
            f"{int(now - c.created_at)}s"
            if now - c.created_at < 3600
            else f"{int((now - c.created_at) // 3600)}h"
        )
        table.add_row(str(c.id), age, turns.get(c.id, ""), c.commit[:12], escape(c.label))
    Console(highlight=False).print(table)


@click.command()
@click.argument("task_id", type=int, metavar="TASK")
@click.option("--to", "to", required=True, metavar="CHECKPOINT", help="A checkpoint number, or base.")
@store_option
def rollback(task_id: int, to: str, url: str | None) -> None:
    """Put TASK's files back as CHECKPOINT had them: files added since are removed, changed and deleted
    ones restored; ignored files, the branch and its commits are left alone.  The files as they were
    are kept as a new checkpoint first (roll back to it to undo).  Refused while the task runs."""
    with _store(url) as store, _workspace_errors():
        saved = rollback_task(store, task_id, to)
    click.echo(f"task {task_id}: files rolled back to checkpoint {to}; as they were: checkpoint {saved.id}")


# --- workspace list, commit, clean ----------------------------------------------------------------


@click.group()
def workspace() -> None:
    """The tasks' workspaces: list them, commit a task's changes on its branch, clean them up."""


@workspace.command(name="list")
@store_option
@json_option
def list_command(url: str | None, as_json: bool) -> None:
    """Tasks with a workspace: status, path, branch, ports."""
    with _store(url) as store:
        found = [t for t in _all_tasks(store) if t.workspace]
    if as_json:
        _echo_json([{"task": t.id, "status": t.status, "workspace": t.workspace} for t in found])
        return
    table = Table("task", "status", "branch", "ports", "path", box=None, pad_edge=False)
    for t in found:
        info = t.workspace or {}
        ports = info.get("ports")
        shown = f"{ports[0]}-{ports[0] + ports[1] - 1}" if ports else ""
        table.add_row(str(t.id), t.status, str(info.get("branch")), shown, escape(str(info.get("path"))))
    Console(highlight=False).print(table)


def _all_tasks(store: Store) -> list[Any]:
    tasks: list[Any] = []
    while page := store.list_tasks(limit=1000, after_id=tasks[-1].id if tasks else 0):
        tasks.extend(page)
    return tasks


@workspace.command()
@click.argument("task_id", type=int, metavar="TASK")
@click.option("--message", "-m", required=True, help="The commit message.")
@click.option("--author", metavar="'NAME <EMAIL>'", help="Who the commit is by (default: orchestrate).")
@store_option
def commit(task_id: int, message: str, author: str | None, url: str | None) -> None:
    """Commit TASK's files as they are on its branch, for you to merge or push."""
    who = None
    if author is not None:
        name, sep, email = author.partition("<")
        if not sep or not email.endswith(">") or not name.strip():
            raise TaskCliError("--author takes 'Name <email>'", 2)
        who = (name.strip(), email[:-1].strip())
    with _store(url) as store, _workspace_errors():
        ws = task_workspace(store, task_id)
        made = commit_changes(ws, message, who)
    if made is None:
        click.echo(f"task {task_id}: nothing to commit on {ws.info.branch}")
    else:
        click.echo(f"task {task_id}: {made[:12]} on branch {ws.info.branch} (in {ws.info.source})")


@workspace.command()
@click.argument("task_ids", type=int, nargs=-1, metavar="[TASK...]")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@store_option
def clean(task_ids: tuple[int, ...], dry_run: bool, url: str | None) -> None:
    """Remove workspaces: TASK's, or every finished task's that is not marked keep.  A workspace a
    run uses is never removed; a branch holding commits beyond its base is kept for you."""
    failed = False
    with _store(url) as store:
        tasks = [store.get(t) for t in task_ids] if task_ids else _all_tasks(store)
        for task in tasks:
            info = task.workspace
            if not info:
                if task_ids:
                    click.echo(f"task {task.id}: no workspace")
                continue
            if not task_ids and (task.status not in TERMINAL or info.get("keep")):
                continue
            if dry_run:
                click.echo(f"task {task.id}: would remove {info.get('path')}")
                continue
            try:
                removed = remove_task_workspace(store, task.id)
            except OrchestrateError as exc:
                failed = True
                click.echo(f"task {task.id}: not removed: {exc}", err=True)
                continue
            click.echo(f"task {task.id}: removed {removed.path}")
    if failed:
        raise TaskCliError("some workspaces were not removed", 1)


# --- registration ---------------------------------------------------------------------------------

COMMANDS = (diff_command, checkpoints, rollback, workspace)


def register(group: click.Group) -> None:
    for command in COMMANDS:
        group.add_command(command)
