"""One claimed run, from spawn to the store: the agent runs through :class:`orchestrate.Run`, its entry
patches and raw log records stream into the store's batching writer, and its end decides the task's
next state (done, retried, failed, cancelled).

Memory stays flat in the run's length: the run streams (it keeps a window of entries; the engine reads
only the result's figures, and the entries are the store's or the raw log's), and both producers pace
themselves to the store (:class:`~orchestrate.store.Pace`), so what waits for it is a few MiB; while
the engine waits, the run reads no more of the agent (run/patch_queue.py), whose pipe fills."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import orjson
from pydantic import BaseModel, ConfigDict, Field

from ..approvals.base import ApprovalService
from ..entries import EntryPatch, ToolUse
from ..errors import OrchestrateError
from ..executors.base import ExecutorOptions
from ..process.pipes import ShutdownPolicy
from ..registry import Registry
from ..run import Run, RunResult
from ..store import EventWriter, Pace, RunEnd, RunRecord, Store, StoreError, TaskRecord
from ..task import Task
from .approvals import StoreApprovals
from .ends import run_end
from .heap import steady_heap
from .observers import Observers
from .procinfo import start_time
from .workspaces import TurnCheckpoints, in_workspace, prepare_workspace

__all__ = ["LiveRun", "Watchdogs", "execute"]

_TAIL_EVERY = 0.05
_TAIL_BLOCK = 1 << 20  # the raw log is read this much at a time, paced between reads


async def _record_session(store: Store, run_id: int, session: str) -> None:
    with contextlib.suppress(StoreError):  # it is also recorded when the run ends
        await anyio.to_thread.run_sync(store.set_session, run_id, session)


class _Tail:
    """How far the raw log has been mirrored into the store."""

    def __init__(self) -> None:
        self.offset = 0
        self.partial = b""
        self.pace: Pace | None = None


class Watchdogs(BaseModel):
    """Limits per phase of a run, each with its own error code on the task (None: no limit).

    ``startup``: seconds from spawn to the agent's first output (``startup_timeout``); ``silence``:
    seconds without output while no approval is pending (``silence_timeout``); ``total``: seconds for
    the whole run (``run_timeout``).  A tripped watchdog stops the agent; the run fails with the code
    and the task is retried if it has attempts left."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    startup: float | None = Field(default=None, gt=0)
    silence: float | None = Field(default=None, gt=0)
    total: float | None = Field(default=None, gt=0)

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.startup, self.silence, self.total))


@dataclass
class LiveRun:
    """What the engine knows of a run it is executing."""

    task: TaskRecord
    run: RunRecord
    handle: Run | None = None
    lease_lost: bool = False
    cancel: anyio.Event = field(default_factory=anyio.Event)
    interrupt: anyio.Event = field(default_factory=anyio.Event)
    """Set when a client asked the store to interrupt this turn (not the task)."""
    notices: list[str] = field(default_factory=list)
    tail: _Tail = field(default_factory=_Tail)
    session_id: str | None = None
    last_output: float | None = None
    """When the agent last wrote to stdout or stderr (monotonic); None before its first output."""
    pending: set[int] = field(default_factory=set)
    """Entries (tool calls) now waiting for an approval."""
    tripped: tuple[str, str] | None = None
    """The watchdog that stopped the run: (error code, message)."""
    tool_states: dict[int, str] = field(default_factory=dict)
    """Each tool call's last status, for the observers."""
    steered: list[int] = field(default_factory=list)
    """The follow-up messages steered into this run, in the order they were sent to it."""
    unsent: list[int] = field(default_factory=list)
    """Steered messages an interrupt dropped before the agent was sent them (they wait again)."""


@dataclass
class RunSettings:
    registry: Registry
    approvals: ApprovalService | None
    log_dir: Path
    shutdown: ShutdownPolicy | None = None
    approval_poll: float = 0.1
    watchdogs: Watchdogs = field(default_factory=lambda: Watchdogs())
    observers: Observers = field(default_factory=Observers)


async def execute(store: Store, writer: EventWriter, live: LiveRun, settings: RunSettings) -> None:
    """Run ``live`` to its end and record it; never raises (except cancellation of the engine)."""
    task, record = live.task, live.run
    steady_heap()  # (once per process: see heap.py; the engine sets it first)
    log = settings.log_dir / f"task-{task.id}-run-{record.id}.jsonl"
    result: RunResult | None = None
    error: tuple[str, str] | None = None
    held = contextlib.ExitStack()
    turn: TurnCheckpoints | None = None
    try:
        executor = settings.registry.create(task.executor, ExecutorOptions(**task.executor_options))
        spec = Task(
            prompt=record.prompt or task.prompt,  # a follow-up turn's messages, or the task's prompt
            cwd=task.cwd,
            resume=record.resume_token,
            resume_fallback=record.resume_token is not None,
            raw_log=log,
            **task.run_options,
        )
        # The task's own worktree (or copy), checkpointed before the agent starts and after its turn.
        workspace = await prepare_workspace(store, task.id, task.workspace, spec)
        if workspace is not None:
            held.enter_context(workspace.in_use())
            spec = in_workspace(spec, workspace)
            turn = TurnCheckpoints(workspace, record.id)
            await turn.before(store)
        approvals = settings.approvals or StoreApprovals(
            store, record.id, timeout=spec.approval_timeout, poll=settings.approval_poll
        )
        run = live.handle = Run(executor, spec, approvals, shutdown=settings.shutdown, streaming=True)
        pace = live.tail.pace = Pace(writer)  # the patches' and the raw log's
        async with run:
            await _record_process(store, run, record.id, log)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_tail, writer, live, log)
                tg.start_soon(_cancel_on_request, live, run)
                tg.start_soon(_interrupt_on_request, live, run)
                if settings.watchdogs.any:
                    tg.start_soon(_watch, live, run, settings.watchdogs)
                observers = settings.observers
                observers.started(task, record)
                async for patch in run.patches():
                    _track_approvals(live, patch)
                    if observers.per_entry:
                        _observe(live, patch, observers)
                    writer.put(
                        task.id, record.id, "patch", patch.model_dump_json(by_alias=True, exclude_none=True)
                    )
                    if pace.due:
                        await anyio.to_thread.run_sync(pace.wait)
                    session = patch.entry.metadata.session_id if patch.entry.metadata else None
                    if session and session != live.session_id:
                        live.session_id = session
                        tg.start_soon(_record_session, store, record.id, session)
                result = await run.wait()
                tg.cancel_scope.cancel()
        if turn is not None:
            await _checkpoint_after(turn, store, live, log)
        await anyio.to_thread.run_sync(_tail_once, writer, live, log)
    except OrchestrateError as exc:  # could not start (unknown executor, CLI missing ...): said on the task
        error = (getattr(exc, "code", None) or "start_failed", f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # bad stored options, or a bug: the task says so, the engine goes on
        error = ("engine_error", f"{type(exc).__name__}: {exc}")
    finally:
        held.close()
    if live.lease_lost:
        return  # another worker declared this run lost and owns the task now
    await _finish(store, writer, live, result, error, settings.observers)


async def _checkpoint_after(turn: TurnCheckpoints, store: Store, live: LiveRun, log: Path) -> None:
    # The turn's work is done and kept by the agent: a checkpoint that fails is said, not fatal.
    try:
        await turn.after(store, log)
    except OrchestrateError as exc:
        live.notices.append(f"workspace: no checkpoint after the turn ({exc})")


async def _record_process(store: Store, run: Run, run_id: int, log: Path) -> None:
    # Run.pids fills in once the run's loop has taken the process; it was spawned before we got here.
    with anyio.move_on_after(5):
        while not run.pids:  # noqa: ASYNC110 (Run has no event for it)
            await anyio.sleep(0.005)
    pid = run.pids[0] if run.pids else None
    started = start_time(pid) if pid else None
    # If the store cannot take it, recovery cannot kill this process by pid; the run itself goes on.
    with contextlib.suppress(StoreError):
        await anyio.to_thread.run_sync(store.set_process, run_id, pid, started, str(log))


async def _tail(writer: EventWriter, live: LiveRun, log: Path) -> None:
    """Mirror the raw log into the store as it grows, one event per complete record."""
    while True:
        await anyio.to_thread.run_sync(_tail_once, writer, live, log)
        await anyio.sleep(_TAIL_EVERY)


def _tail_once(writer: EventWriter, live: LiveRun, log: Path) -> None:
    """What the raw log has gained since, a block at a time, each put for the store before the next
    is read (blocking: in a thread of its own)."""
    state = live.tail
    try:
        with log.open("rb") as f:
            f.seek(state.offset)
            while data := f.read(_TAIL_BLOCK):
                state.offset += len(data)
                lines = (state.partial + data).split(b"\n")
                state.partial = lines.pop()
                _mirror(writer, live, lines)
                if state.pace is not None:
                    state.pace.wait()
    except OSError:
        return


def _mirror(writer: EventWriter, live: LiveRun, lines: list[bytes]) -> None:
    for line in lines:
        if not line.strip():
            continue
        writer.put(live.task.id, live.run.id, "raw", line)
        if b'"stream":"stdout"' in line or b'"stream":"stderr"' in line:
            live.last_output = time.monotonic()
        if b'"restart"' in line:
            _continuity(live, line)


def _continuity(live: LiveRun, line: bytes) -> None:
    try:
        event = orjson.loads(line).get("event") or {}
    except orjson.JSONDecodeError:
        return
    if event.get("type") == "restart":
        live.notices.append(
            f"continuity: the agent's session {live.run.resume_token} could not be resumed, so this run "
            f"started a fresh session ({event.get('reason')})"
        )


def _track_approvals(live: LiveRun, patch: EntryPatch) -> None:
    # Whatever answers (the store, a person, a policy), a tool call shows pending_approval meanwhile.
    kind = patch.entry.type
    if isinstance(kind, ToolUse):
        if kind.tool.status == "pending_approval":
            live.pending.add(patch.index)
        else:
            live.pending.discard(patch.index)


def _observe(live: LiveRun, patch: EntryPatch, observers: Observers) -> None:
    kind = patch.entry.type
    if not isinstance(kind, ToolUse):
        return
    status, before = kind.tool.status, live.tool_states.get(patch.index)
    if status == before:
        return  # a patch that changed something else (streamed input, output)
    live.tool_states[patch.index] = status
    observers.tool(live.task, live.run, patch.entry)
    if status == "pending_approval":
        observers.asked(live.task, live.run, patch.entry, "asked")
    elif before == "pending_approval":
        observers.asked(live.task, live.run, patch.entry, "answered")


async def _watch(live: LiveRun, run: Run, dogs: Watchdogs) -> None:
    """Stop the run when a phase outlasts its limit."""
    started = time.monotonic()
    quiet_since = started
    limits = [v for v in (dogs.startup, dogs.silence, dogs.total) if v is not None]
    tick = min(0.1, min(limits) / 5)
    while live.tripped is None:
        await anyio.sleep(tick)
        now = time.monotonic()
        if live.pending:
            quiet_since = now  # waiting for an approval is not silence
        elif live.last_output is not None and live.last_output > quiet_since:
            quiet_since = live.last_output
        if dogs.total is not None and now - started > dogs.total:
            live.tripped = ("run_timeout", f"the run took longer than its limit of {dogs.total:g} s")
        elif live.last_output is None and dogs.startup is not None and now - started > dogs.startup:
            live.tripped = (
                "startup_timeout",
                f"the agent wrote nothing within {dogs.startup:g} s of starting",
            )
        elif live.last_output is not None and dogs.silence is not None and now - quiet_since > dogs.silence:
            live.tripped = (
                "silence_timeout",
                f"the agent wrote nothing for {dogs.silence:g} s while no approval was pending",
            )
    run.cancel()


async def _cancel_on_request(live: LiveRun, run: Run) -> None:
    await live.cancel.wait()
    run.cancel()


async def _interrupt_on_request(live: LiveRun, run: Run) -> None:
    await live.interrupt.wait()
    try:
        dropped = await run.interrupt()  # the agent's own way: the turn ends, the session stays resumable
    except OrchestrateError as exc:  # its channel is gone already (the turn was ending anyway)
        live.notices.append(f"the interrupt could not be delivered ({exc})")
        return
    # Steered messages the driver still held for a next turn (ACP, Codex: a turn at a time) were
    # dropped with this one: they wait again, the task's next turn, not lost as "steered".
    # _finish puts them back before the run's end is stored (which makes waiting ones the next turn).
    live.unsent = live.steered[len(live.steered) - len(dropped) :] if dropped else []


async def _finish(
    store: Store,
    writer: EventWriter,
    live: LiveRun,
    result: RunResult | None,
    error: tuple[str, str] | None,
    observers: Observers,
) -> None:
    await anyio.to_thread.run_sync(writer.flush, 30.0)
    end, status, reason = _decide(live, result, error)
    observers.ended(live.task, live.run, end, status)
    trouble = writer.trouble.pop(live.task.id, None)
    notice = "; ".join(live.notices) or None
    if trouble is not None:
        notice = "; ".join(filter(None, [notice, f"store: {trouble.describe()}"]))
        if trouble.dropped:
            end |= {"error_code": trouble.error.code, "error": f"the store lost events: {trouble.describe()}"}
            status = "failed" if status == "done" else status
    # The store may be locked or full right now: keep trying (bounded); if it never takes the result,
    # the lease expires and the next worker recovers the run as lost.  Nothing is raised from here.
    why = "the turn they waited for was interrupted"
    left = live.handle.unsent() if live.handle is not None and not live.unsent else []
    if left:  # the run ended (time limit, crash, cancel) with steered messages the agent never got
        live.unsent = live.steered[len(live.steered) - len(left) :]
        why = "the run ended before the agent was sent them"
    for delay in (0.05, 0.2, 0.5, 1, 2, 4, 8):
        try:
            if live.unsent:
                await anyio.to_thread.run_sync(store.unsteer, live.run.id, live.unsent, why)
                live.unsent = []
            await anyio.to_thread.run_sync(
                lambda: store.finish_run(live.run.id, end, status, reason=reason, notice=notice)
            )
            return
        except StoreError:
            await anyio.sleep(delay)


def _decide(
    live: LiveRun, result: RunResult | None, error: tuple[str, str] | None
) -> tuple[RunEnd, str, str | None]:
    task = live.task
    end = run_end(result, error)
    if live.tripped is not None and not live.cancel.is_set():
        code, message = live.tripped
        end |= {"status": "failed", "error_code": code, "error": message}
    elif result is not None and result.outcome == "success":
        return end, "done", None
    if live.cancel.is_set():
        return end, "cancelled", "cancelled by request"
    if live.interrupt.is_set() and end["status"] == "interrupted":
        # The turn, not the task: waiting follow-up messages are the next turn (store.finish_run).
        return end, "done", f"run {live.run.id} interrupted by request"
    if task.attempts < task.max_attempts:
        return end, "queued", f"run {live.run.id} {end['status']}; retrying (attempt {task.attempts + 1})"
    return end, "failed", f"run {live.run.id} {end['status']}"
