"""The commands over the store and the engine: ``submit``, ``tasks``, ``show``, ``follow``, ``cancel``,
``interrupt``, ``retry``, ``send``, ``approvals``, ``approve``, ``deny`` and ``worker``; and the hook that
records an ``orchestrate run`` in the store.  Each command opens the store (``--store URL``, or
``$ORCHESTRATE_STORE``, default SQLite under ``$ORCHESTRATE_HOME``), does one thing and exits; only
``worker`` and ``follow`` stay.  Every listing and showing command takes ``--json``.

Exit codes: 0 success, 1 the store failed or the followed task did not end done (or an approval was
already answered), 2 usage error (no such task, bad option).
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import click
import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..approvals import ApprovalService, AutoApprove, AutoDeny, RulePolicy
from ..engine import Engine, Watchdogs
from ..engine.rebuild import rebuild_patches
from ..entries import PATCH_ADAPTER
from ..errors import OrchestrateError
from ..process.env import parse_env_overrides
from ..registry import default_registry
from ..store import Event, Limits, NotFoundError, RunRecord, Store, StoreError, TaskRecord, TaskSpec
from .options import build_executor_options, read_stdin, workspace_flags, workspace_run_options
from .recording import STORE_ENV
from .render import TextRenderer

__all__ = ["register"]

"""The store's URL for every command; ``off`` keeps ``orchestrate run`` from recording."""


class TaskCliError(click.ClickException):
    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it on the class


@contextmanager
def _store(url: str | None) -> Iterator[Store]:
    """The store, with its errors as the CLI's: no such task is a usage error, the rest exit 1."""
    try:
        with Store.open(url) as store:
            yield store
    except NotFoundError as exc:
        raise TaskCliError(str(exc), 2) from exc
    except OrchestrateError as exc:
        raise TaskCliError(str(exc), 1) from exc


store_option = click.option(
    "--store", "url", envvar=STORE_ENV, help="The store's URL (default: SQLite under $ORCHESTRATE_HOME)."
)
json_option = click.option("--json", "as_json", is_flag=True, help="JSON for scripts.")


def _echo_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


# --- submit ---------------------------------------------------------------------------------------


def executor_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The executor and run options ``orchestrate run`` takes, for a task to run later."""
    options = [
        click.option("--executor", "-e", "executor_name", required=True, help="Which agent."),
        click.option(
            "--cwd", type=click.Path(file_okay=False, exists=True, path_type=Path), default=Path.cwd
        ),
        click.option("--model", help="Model name passed to the agent."),
        click.option("--permission-mode", help="The agent's own permission mode."),
        click.option("--base-command", "--command", "base_command", help="The CLI to run."),
        click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="Environment override."),
        click.option("--sandbox", help="Codex: read-only | workspace-write | danger-full-access."),
        click.option("--approval-policy", help="Codex: untrusted | on-request | never."),
        click.option("--config", "-c", "config_pairs", multiple=True, metavar="K=V", help="CLI config."),
        click.option("--mcp-config", type=click.Path(dir_okay=False, exists=True, path_type=Path)),
        click.option("--stable-seconds", type=click.FloatRange(min=0, min_open=True)),
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds for a run."),
        click.option("--approval-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@click.command()
@executor_options
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option("--after", "after", type=int, multiple=True, metavar="TASK", help="Run after TASK is done.")
@click.option("--label", "labels", multiple=True, help="A label (limits and filters use them).")
@click.option("--max-attempts", type=click.IntRange(1, 100), default=1, show_default=True)
@workspace_flags
@store_option
@click.argument("prompt")
def submit(
    executor_name: str,
    cwd: Path,
    model: str | None,
    permission_mode: str | None,
    base_command: str | None,
    env_pairs: tuple[str, ...],
    sandbox: str | None,
    approval_policy: str | None,
    config_pairs: tuple[str, ...],
    mcp_config: Path | None,
    stable_seconds: float | None,
    timeout: float | None,
    approval_timeout: float,
    priority: int,
    after: tuple[int, ...],
    labels: tuple[str, ...],
    max_attempts: int,
    workspace: str | None,
    workspace_base: str | None,
    workspace_setup: str | None,
    workspace_globs: tuple[str, ...],
    workspace_keep: bool | None,
    workspace_root: Path | None,
    url: str | None,
    prompt: str,
) -> None:
    """Queue PROMPT for a worker and print the new task's id.  PROMPT `-` reads it from stdin.
    With --worktree the task works in its own git worktree and branch (see `orchestrate diff`)."""
    if prompt == "-":
        prompt = read_stdin("prompt")
    if not prompt.strip():
        raise TaskCliError("the prompt is empty", 2)
    try:
        options = build_executor_options(
            model=model,
            permission_mode=permission_mode,
            base_command=base_command,
            sandbox=sandbox,
            approval_policy=approval_policy,
            config_pairs=config_pairs,
            mcp_config=mcp_config,
            stable_seconds=stable_seconds,
        )
        default_registry.create(executor_name, options)  # an unknown executor fails now, not in a worker
        run_options: dict[str, Any] = {"approval_timeout": approval_timeout}
        if env_pairs:
            run_options["env"] = parse_env_overrides(env_pairs)
        if timeout is not None:
            run_options["timeout"] = timeout
        chosen = workspace_run_options(
            workspace, workspace_base, workspace_setup, workspace_globs, workspace_keep, workspace_root
        )
        if chosen:
            run_options |= {
                "workspace": chosen["workspace"],
                "workspace_options": chosen["workspace_options"].model_dump(
                    mode="json", exclude_defaults=True
                ),
            }
        spec = TaskSpec(
            prompt=prompt,
            executor=executor_name,
            executor_options=options.model_dump(mode="json", exclude_defaults=True),
            run_options=run_options,
            cwd=cwd.resolve(),
            priority=priority,
            depends_on=list(after),
            labels=list(labels),
            max_attempts=max_attempts,
        )
    except (OrchestrateError, ValueError) as exc:
        raise TaskCliError(str(exc), 2) from exc
    with _store(url) as store:
        task = store.submit(spec)
    click.echo(task.id)


# --- tasks, show ----------------------------------------------------------------------------------


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _cost(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


_STATUS_STYLE = {
    "done": "green",
    "failed": "red",
    "lost": "red",
    "blocked": "yellow",
    "cancelled": "yellow",
    "waiting_approval": "magenta",
    "running": "cyan",
}


@click.command(name="tasks")
@click.option("--status", "statuses", multiple=True, help="Only tasks in this status (repeatable).")
@click.option("--label", help="Only tasks with this label.")
@click.option("--executor", "-e", "executor_name", help="Only tasks of this executor.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@store_option
@json_option
def tasks_command(
    statuses: tuple[str, ...],
    label: str | None,
    executor_name: str | None,
    limit: int,
    url: str | None,
    as_json: bool,
) -> None:
    """List tasks, oldest first: id, status, executor, age, cost."""
    with _store(url) as store:
        found = store.list_tasks(
            status=list(statuses) or None, label=label, executor=executor_name, limit=limit
        )
    if as_json:
        _echo_json([t.model_dump(mode="json") for t in found])
        return
    now = time.time()
    table = Table("id", "status", "executor", "age", "cost", "prompt", box=None, pad_edge=False)
    for t in found:
        style = _STATUS_STYLE.get(t.status, "")
        first_line = t.prompt.strip().splitlines()[0] if t.prompt.strip() else ""
        table.add_row(
            str(t.id),
            f"[{style}]{t.status}[/]" if style else t.status,
            t.executor,
            _age(now - t.created_at),
            _cost(t.cost_usd),
            escape(first_line[:60]),
        )
    Console(highlight=False).print(table)


def _entries(events: list[Event], run_id: int) -> list[Any]:
    """A run's entries as its stored patches leave them (JSON, camelCase), in index order."""
    found: dict[int, Any] = {}
    for e in events:
        if e.run_id == run_id and e.kind == "patch":
            found[e.data["index"]] = e.data["entry"]
    return [found[i] for i in sorted(found)]


def _rebuilt(store: Store, runs: list[RunRecord]) -> list[Event]:
    """Each run's raw log replayed, as patch events (numbered within the run only: they are not stored)."""
    made: list[Event] = []
    for run in runs:
        for n, patch in enumerate(rebuild_patches(store, run.id), 1):
            data = orjson.loads(patch.model_dump_json(by_alias=True, exclude_none=True))
            made.append(
                Event(task_id=run.task_id, seq=0, run_id=run.id, run_seq=n, ts=0.0, kind="patch", data=data)
            )
    return made


def _all_events(store: Store, task_id: int) -> list[Event]:
    events: list[Event] = []
    while page := store.events(task_id=task_id, after=events[-1].seq if events else 0):
        events.extend(page)
    return events


@click.command()
@click.argument("task_id", type=int, metavar="TASK")
@click.option(
    "--rebuild", is_flag=True, help="Entries rebuilt from each run's raw log, not the stored patches."
)
@store_option
@json_option
def show(task_id: int, rebuild: bool, url: str | None, as_json: bool) -> None:
    """A task: its runs, their entries as `run` shows them, and tokens and cost summed."""
    with _store(url) as store:
        task = store.get(task_id)
        runs = store.runs(task_id)
        events = _all_events(store, task_id)
        messages = store.messages(task_id)
        approvals = store.approvals(task_id=task_id, status=None)
        if rebuild:  # the raw log is the source of truth: replay it as patches, in place of the stored ones
            events = [e for e in events if e.kind != "patch"] + _rebuilt(store, runs)
    if as_json:
        _echo_json(
            {
                "task": task.model_dump(mode="json"),
                "runs": [r.model_dump(mode="json") | {"entries": _entries(events, r.id)} for r in runs],
                "messages": messages,
                "approvals": [a.model_dump(mode="json") for a in approvals],
            }
        )
        return
    console = Console(highlight=False)
    _task_head(console, task)
    for run in runs:
        _run_head(console, run)
        renderer = TextRenderer(console)
        for e in events:
            if e.run_id == run.id and e.kind == "patch":
                renderer.on_patch(PATCH_ADAPTER.validate_python(e.data))
        renderer.finish()
    for m in messages:
        if m["delivered_run_id"] is None:
            console.print(f"[magenta]message {m['id']} waiting:[/] {escape(m['text'])}")
        else:
            how = "steered into" if m["delivery"] == "steered" else "the turn of"
            console.print(
                f"[magenta]message {m['id']} {how} run {m['delivered_run_id']}:[/] {escape(m['text'])}"
            )
    for a in approvals:
        if a.status == "open":
            what = a.request.get("command") or a.request.get("tool_name")
            console.print(f"[magenta]approval {a.id} open:[/] {escape(str(what))}")


def _task_head(console: Console, task: TaskRecord) -> None:
    style = _STATUS_STYLE.get(task.status, "bold")
    extra = []
    if task.labels:
        extra.append("labels " + ",".join(task.labels))
    if task.depends_on:
        extra.append("after " + ",".join(map(str, task.depends_on)))
    console.print(
        f"[bold]task {task.id}[/] [{style}]{task.status}[/] {task.executor} priority {task.priority} "
        + escape(" ".join(extra))
    )
    console.print(f"[dim]prompt:[/] {escape(task.prompt)}")
    if task.workspace:
        where = f"{task.workspace.get('path')} (branch {task.workspace.get('branch')})"
        shown = f"[dim]workspace:[/] {escape(where)}; `orchestrate diff {task.id}` shows its changes"
        console.print(shown, soft_wrap=True)
    for name in ("reason", "error", "notice"):
        value = getattr(task, name)
        if value:
            console.print(f"[dim]{name}:[/] {escape(value)}")
    console.print(
        f"tokens: {task.input_tokens} in, {task.output_tokens} out, {task.cache_read_tokens} cache read, "
        f"{task.cache_write_tokens} cache write; cost {_cost(task.cost_usd)} (over {task.attempts} runs)"
    )


def _run_head(console: Console, run: RunRecord) -> None:
    style = _STATUS_STYLE.get(run.status, "bold")
    parts = [f"attempt {run.attempt}", run.kind]
    if run.exit_code is not None:
        parts.append(f"exit {run.exit_code}")
    if run.session_id:
        parts.append(f"session {run.session_id}")
    if run.cost_usd is not None:
        parts.append(_cost(run.cost_usd))
    heading = f"\n[bold]── run {run.id}[/] [{style}]{run.status}[/] " + escape(", ".join(parts))
    console.print(heading, soft_wrap=True)
    if run.prompt:
        console.print(f"[bold green]user[/] {escape(run.prompt)}")
    if run.error and run.status != "done":
        console.print(f"[red]{escape(run.error)}[/]")


# --- follow ---------------------------------------------------------------------------------------


@click.command()
@click.argument("task_id", type=int, metavar="TASK")
@click.option("--after", type=int, default=0, show_default=True, help="Only events after this seq.")
@click.option("--poll", type=click.FloatRange(min=0.01), default=0.2, show_default=True)
@store_option
@click.option("--json", "as_json", is_flag=True, help="One JSON event per line (raw records included).")
def follow(task_id: int, after: int, poll: float, url: str | None, as_json: bool) -> None:
    """Show a task's events as they happen, from any terminal: what is stored, then live ones, until
    the task ends.  Exits 0 if it ended done."""
    try:
        status = anyio.run(_follow, url, task_id, after, poll, as_json)
    except NotFoundError as exc:
        raise TaskCliError(str(exc), 2) from exc
    except OrchestrateError as exc:
        raise TaskCliError(str(exc), 1) from exc
    sys.exit(0 if status == "done" else 1)


async def _follow(url: str | None, task_id: int, after: int, poll: float, as_json: bool) -> str:
    out = sys.stdout.buffer
    console = Console(highlight=False)
    renderers: dict[int, TextRenderer] = {}
    with Store.open(url) as store:
        store.get(task_id)  # no such task: say so now, not after polling
        engine = Engine(store, poll=poll)
        async for event in engine.subscribe(task_id, after=after):
            if as_json:
                out.write(orjson.dumps(event.model_dump(mode="json")) + b"\n")
                out.flush()
                continue
            if event.kind == "patch" and event.run_id is not None:
                if event.run_id not in renderers:
                    for other in renderers.values():
                        other.finish()
                    renderers[event.run_id] = TextRenderer(console)
                renderers[event.run_id].on_patch(PATCH_ADAPTER.validate_python(event.data))
            elif event.kind in ("state", "notice"):
                for r in renderers.values():
                    r.finish()
                console.print(_describe(event), markup=False)
        for r in renderers.values():
            r.finish()
        return (await engine.get(task_id)).status


def _describe(event: Event) -> str:
    data = event.data
    if event.kind == "notice":
        return f"[task {event.task_id}] notice: {data.get('notice')}"
    details = [f"{k} {data[k]}" for k in ("run_id", "attempt", "approval_id", "command") if k in data]
    why = data.get("reason") or data.get("error")
    text = f"[task {event.task_id}] {data.get('status')}"
    if details:
        text += " (" + ", ".join(details).replace("_id", "") + ")"
    return text + (f": {why}" if why else "")


# --- cancel, retry, send ------------------------------------------------------------------------


@click.command()
@click.argument("task_ids", type=int, nargs=-1, required=True, metavar="TASK...")
@store_option
def cancel(task_ids: tuple[int, ...], url: str | None) -> None:
    """Cancel tasks: a queued one at once, a running one by the worker that runs it (any process)."""
    with _store(url) as store:
        for task_id in task_ids:
            task = store.cancel(task_id)
            state = "cancel requested (its worker stops it)" if task.cancel_requested else task.status
            click.echo(f"task {task_id}: {state}")


@click.command()
@click.argument("task_id", type=int, metavar="TASK")
@click.argument("message", required=False)
@store_option
def interrupt(task_id: int, message: str | None, url: str | None) -> None:
    """Interrupt TASK's running turn the agent's own way, by the worker that runs it (any process, a
    Temporal worker too): the turn ends, the task does not.  MESSAGE (`-`: stdin), sent first, is its
    next turn, in the same session, as are messages sent meanwhile (`orchestrate send`); without one
    it rests, done, until one is sent."""
    text = None if message is None else read_stdin("message") if message == "-" else message
    if text is not None and not text.strip():  # refused before the interrupt is asked, not after
        raise click.UsageError("the message is empty: say what the next turn is, or give none")
    with _store(url) as store:
        # The interrupt first, the message after: sent first, a turn ending in between made the
        # message a turn of its own at once, and the interrupt then stopped that one (and a --steer
        # worker could take it into the turn being interrupted).  Asked of a turn, the interrupt
        # lapses when that turn ends, so it never reaches the message's turn.
        try:
            store.interrupt(task_id)
        except NotFoundError:
            raise
        except StoreError:
            if text is None or store.get(task_id).cancel_requested:
                raise
            _, message_id, starts = store.send(task_id, text)  # no turn to interrupt: it is the next
            how = "queued as a follow-up run" if starts else "waits for the task's next turn"
            click.echo(f"task {task_id}: no turn running; message {message_id} {how}")
            return
        if text is not None:
            store.send(task_id, text)
    then = "then the message" if message is not None else "the task rests"
    click.echo(f"task {task_id}: interrupt requested (its worker interrupts the turn; {then})")


@click.command()
@click.argument("task_ids", type=int, nargs=-1, required=True, metavar="TASK...")
@store_option
def retry(task_ids: tuple[int, ...], url: str | None) -> None:
    """Queue tasks that ended without success for one more attempt (and unblock their dependents)."""
    with _store(url) as store:
        for task_id in task_ids:
            click.echo(f"task {task_id}: {store.retry(task_id).status}")


@click.command()
@click.argument("task_id", type=int, metavar="TASK")
@click.argument("message")
@store_option
def send(task_id: int, message: str, url: str | None) -> None:
    """Send TASK a follow-up MESSAGE (`-`: stdin): a new turn in the agent's session, at once if the
    task has ended, else when its current turn ends."""
    if message == "-":
        message = read_stdin("message")
    with _store(url) as store:
        _, message_id, starts = store.send(task_id, message)
    when = (
        "queued as a follow-up run"
        if starts
        else "waits for the current turn to end (a worker with --steer sends it in at once if the agent "
        "takes messages mid-turn; `show` says which)"
    )
    click.echo(f"message {message_id} for task {task_id}: {when}")


# --- approvals ------------------------------------------------------------------------------------


@click.command()
@click.option("--task", "task_id", type=int, help="Only this task's.")
@click.option("--all", "everything", is_flag=True, help="Answered and withdrawn ones too.")
@store_option
@json_option
def approvals(task_id: int | None, everything: bool, url: str | None, as_json: bool) -> None:
    """Permission requests waiting in the store for an answer (`approve` or `deny` them)."""
    with _store(url) as store:
        found = store.approvals(task_id=task_id, status=None if everything else "open")
    if as_json:
        _echo_json([a.model_dump(mode="json") for a in found])
        return
    table = Table("id", "task", "status", "tool", "command or input", box=None, pad_edge=False)
    for a in found:
        what = a.request.get("command") or orjson.dumps(a.request.get("tool_input")).decode()
        status = a.status if a.status != "answered" else f"{a.decision} by {a.answered_by}"
        table.add_row(str(a.id), str(a.task_id), status, str(a.request.get("tool_name")), escape(what[:80]))
    Console(highlight=False).print(table)


def _answer(approval_id: int, decision: str, reason: str | None, url: str | None, by: str) -> None:
    with _store(url) as store:
        won, record = store.answer_approval(approval_id, decision, reason, by=by)
    if won:
        click.echo(f"approval {approval_id}: {decision}")
        return
    if record.status == "withdrawn":
        raise TaskCliError(f"approval {approval_id} was withdrawn: {record.reason}")
    raise TaskCliError(
        f"approval {approval_id} was already answered: {record.decision} by {record.answered_by}"
    )


_by_option = click.option("--by", default=None, help="Who answers (default: user@host).")


def _who(by: str | None) -> str:
    import getpass
    import socket

    return by or f"{getpass.getuser()}@{socket.gethostname()}"


@click.command()
@click.argument("approval_id", type=int, metavar="APPROVAL")
@click.option("--reason", help="Passed on to the agent.")
@_by_option
@store_option
def approve(approval_id: int, reason: str | None, by: str | None, url: str | None) -> None:
    """Allow a waiting tool call.  The first answer wins; a later one exits 1 and says who answered."""
    _answer(approval_id, "approved", reason, url, _who(by))


@click.command()
@click.argument("approval_id", type=int, metavar="APPROVAL")
@click.option("--reason", default="denied by the user", show_default=True, help="Passed on to the agent.")
@_by_option
@store_option
def deny(approval_id: int, reason: str, by: str | None, url: str | None) -> None:
    """Refuse a waiting tool call.  The first answer wins; a later one exits 1 and says who answered."""
    _answer(approval_id, "denied", reason, url, _who(by))


# --- worker ---------------------------------------------------------------------------------------


def _pairs(values: tuple[str, ...], what: str) -> dict[str, int]:
    out = {}
    for value in values:
        name, sep, n = value.rpartition("=")
        if not sep or not name or not n.isdigit():
            raise TaskCliError(f"{what} takes NAME=N, not {value!r}", 2)
        out[name] = int(n)
    return out


def _worker_approvals(spec: str) -> ApprovalService | None:
    """None: the engine's own (requests wait in the store for `orchestrate approve`)."""
    match spec:
        case "store":
            return None
        case "auto":
            return AutoApprove()
        case "deny":
            return AutoDeny()
    path = Path(spec)
    if not path.is_file():
        raise TaskCliError(f"--approvals must be store, auto, deny or a policy file; not {spec!r}", 2)
    try:
        return RulePolicy.from_file(path)
    except OrchestrateError as exc:
        raise TaskCliError(str(exc), 2) from exc


@click.command()
@click.option("--capacity", type=click.IntRange(1), default=4, show_default=True, help="Runs at once here.")
@click.option("--total", type=click.IntRange(0), help="Live runs at once across every worker.")
@click.option("--per-executor", multiple=True, metavar="NAME=N", help="Limit per executor (all workers).")
@click.option("--per-label", multiple=True, metavar="LABEL=N", help="Limit per label (all workers).")
@click.option("--executor", "-e", "only", multiple=True, help="Take only tasks of these executors.")
@click.option("--lease", type=click.FloatRange(min=0.5), default=30.0, show_default=True)
@click.option("--poll", type=click.FloatRange(min=0.01), default=0.2, show_default=True)
@click.option(
    "--approvals",
    "approvals_spec",
    default="store",
    show_default=True,
    help="store (wait for `orchestrate approve`) | auto | deny | PATH to a policy file.",
)
@click.option(
    "--startup-timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds to first output."
)
@click.option("--silence-timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds of silence.")
@click.option("--run-timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds for a whole run.")
@click.option(
    "--steer",
    is_flag=True,
    help="Send a follow-up into a busy agent at once where it takes messages mid-turn (Claude, Codex, "
    "ACP); otherwise it waits for the turn to end.  `show` says which.",
)
@click.option(
    "--temporal",
    "temporal",
    metavar="ADDRESS",
    help="Run each task as a Temporal workflow and its turns as activities on this machine (the "
    "temporal extra); namespace, TLS, API key from TEMPORAL_*.",
)
@click.option("--namespace", help="Temporal namespace (default: $TEMPORAL_NAMESPACE, then default).")
@click.option(
    "--queue", default="orchestrate", show_default=True, help="Temporal: this machine's workspace queue."
)
@click.option(
    "--workflow-prefix",
    default="orchestrate",
    show_default=True,
    help="Temporal: workflow ids PREFIX-task-ID; one prefix per store sharing a namespace.",
)
@click.option(
    "--heartbeat-timeout",
    type=click.FloatRange(min=0.5),
    default=30.0,
    show_default=True,
    help="Temporal: seconds without a heartbeat before a turn moves to another worker.",
)
@store_option
def worker(
    capacity: int,
    total: int | None,
    per_executor: tuple[str, ...],
    per_label: tuple[str, ...],
    only: tuple[str, ...],
    lease: float,
    poll: float,
    approvals_spec: str,
    startup_timeout: float | None,
    silence_timeout: float | None,
    run_timeout: float | None,
    steer: bool,
    temporal: str | None,
    namespace: str | None,
    queue: str,
    workflow_prefix: str,
    heartbeat_timeout: float,
    url: str | None,
) -> None:
    """Run queued tasks until SIGTERM or SIGINT (Ctrl-C).  Any number of workers share one store's
    queue, but plain and Temporal workers never share a store: a worker finding the other kind at work
    on it says so and exits 1.

    Plain (no --temporal): this process claims queued tasks and runs their agents here.  The first
    SIGTERM or SIGINT stops taking tasks and lets the live turns finish; a second one stops them now
    (their tasks are recovered by the next worker, and retried, the agent's session resumed, if they
    have attempts left).

    --temporal ADDRESS (the temporal extra): each task is a Temporal workflow and each of its turns an
    activity, run by a worker polling --queue (the machine that holds the task's files).  SIGTERM or
    SIGINT stops this worker at once and hands its live turns back, not finished: their agents are
    stopped, no end is recorded, and Temporal retries each turn on another worker of the queue, which
    resumes the agent's session (a rolling restart loses no work)."""
    limits = Limits(
        total=total,
        per_executor=_pairs(per_executor, "--per-executor"),
        per_label=_pairs(per_label, "--per-label"),
    )
    service = _worker_approvals(approvals_spec)
    options: dict[str, Any] = {
        "limits": limits,
        "capacity": capacity,
        "executors": list(only) or None,
        "lease": lease,
        "poll": poll,
        "approvals": service,
        "watchdogs": Watchdogs(startup=startup_timeout, silence=silence_timeout, total=run_timeout),
    }
    if steer and temporal is not None:
        raise TaskCliError("--steer is not available with --temporal", 2)
    if steer:
        options["steer"] = True
    try:
        if temporal is not None:
            where = {"address": temporal, "namespace": namespace, "queue": queue, "prefix": workflow_prefix}
            anyio.run(_work_temporal, url, options, where | {"heartbeat_timeout": heartbeat_timeout})
        else:
            anyio.run(_work, url, options)
    except OrchestrateError as exc:
        raise TaskCliError(str(exc), 1) from exc


async def _work_temporal(url: str | None, options: dict[str, Any], where: dict[str, Any]) -> None:
    try:
        from ..engine.temporal import TemporalOptions, TemporalWorker
    except ImportError as exc:
        extra = "pip install 'agent-orchestrate[temporal]'"
        raise TaskCliError(f"--temporal needs the temporal extra: {extra} ({exc})") from exc
    options.pop("lease")  # Temporal's heartbeat timeout decides when a worker is gone
    with Store.open(url) as store:
        try:
            worker = TemporalWorker(store, TemporalOptions(**where), **options)
            await worker.__aenter__()
        except RuntimeError as exc:  # Temporal unreachable
            raise TaskCliError(f"cannot reach Temporal at {where['address']}: {exc}") from exc
        try:
            async with anyio.create_task_group() as tg:

                async def on_signals(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                        task_status.started()
                        count = 0
                        async for _ in signals:
                            count += 1
                            click.echo(f"worker {worker.worker}: stopping", err=True)
                            worker.stop()
                            if count > 1:
                                tg.cancel_scope.cancel()

                await tg.start(on_signals)
                for run_id in worker.reaped:
                    click.echo(f"worker {worker.worker}: killed the agent of dead run {run_id}", err=True)
                click.echo(
                    f"worker {worker.worker} on {store.engine.url!r}, Temporal {where['address']} "
                    f"queue {where['queue']}",
                    err=True,
                )
                await worker.run()
                tg.cancel_scope.cancel()
        finally:
            await worker.__aexit__(None, None, None)


async def _work(url: str | None, options: dict[str, Any]) -> None:
    async with Engine.open(url, **options) as engine:
        await engine.enter()  # refused before anything starts when Temporal workers work the store
        async with anyio.create_task_group() as tg:

            async def on_signals(
                *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
            ) -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    task_status.started()  # the handlers are in place: "worker ... on" may be said
                    count = 0
                    async for _ in signals:
                        count += 1
                        if count == 1:
                            click.echo(f"worker {engine.worker}: stopping once live runs end", err=True)
                            engine.stop()
                        else:
                            click.echo(f"worker {engine.worker}: stopping now", err=True)
                            tg.cancel_scope.cancel()

            await tg.start(on_signals)
            click.echo(f"worker {engine.worker} on {engine.store.engine.url!r}", err=True)
            await engine.work()
            tg.cancel_scope.cancel()


# --- registration ---------------------------------------------------------------------------------

COMMANDS = (
    submit,
    tasks_command,
    show,
    follow,
    cancel,
    interrupt,
    retry,
    send,
    approvals,
    approve,
    deny,
    worker,
)


def register(group: click.Group) -> None:
    for command in COMMANDS:
        group.add_command(command)
