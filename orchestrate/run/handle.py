"""One running agent: the task group that pumps process -> driver -> normalizer, and the handle a
caller holds.  This is the only place where reading bytes and parsing them meet."""

from __future__ import annotations

import math
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from ..approvals.pipeline import ApprovalPipeline
from ..approvals.simple import AutoDeny
from ..errors import ConfigError, OrchestrateError, ProcessExitedError, RunClosedError, SpawnError
from ..executors.base import Capabilities, Executor
from ..process.pipes import STDOUT_PIPE_BYTES, AgentProcess, Chunk, ProcessSpec, ShutdownPolicy
from ..process.rawlog import FLUSH_SECONDS, RAW_LOG_FAILED, RawLogWriter, default_log_dir
from ..process.redact import Redactor, redaction_enabled
from ..task import Task
from ..wire.lines import WireLine
from ..wire.notes import Exit, Note, Prepared, Restart, RunError
from .patch_queue import PatchQueue

# What only the live loop needs (the normalizer, the driver, the entry and result models, the pty)
# is imported once the agent is spawned, while it starts up on another core, not before: the time
# to the first entry is then the CLI's own start-up plus ours up to the spawn (bench/first_entry.py).
if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream

    from ..approvals.base import ApprovalService
    from ..entries import EntryPatch, NormalizedEntry, ToolUseEntry
    from ..normalizers.base import Normalizer
    from ..process.base import AgentIO
    from ..process.prestart import Prestarted
    from .driver import Driver
    from .result import Outcome, RunResult
    from .tally import EntryTally

__all__ = ["Run"]

_EOF_GRACE = 5.0
# Chunks read but not yet handled: a read takes at most the stdout pipe's capacity (1 MiB where the
# system allows it, process/pipes.py), so at most 4 MiB wait here.  The consumer takes the next chunk
# as soon as it has handled one, so a longer queue would only hold more while it is stalled.
_CHUNK_BUFFER = 4
# A streaming run's caller takes every patch as it comes: while this many windows of patches wait
# unread, the run reads no more of the agent (see run/patch_queue.py), and after _STALL seconds
# without a read it takes the caller as gone and stops waiting for it.
_UNREAD_WINDOWS = 2
_STALL = 30.0
_T = TypeVar("_T", WireLine, bytes)


class Run:
    """A live run.  Use as ``async with executor_run(...) as run:``; iterate :meth:`patches`, call
    :meth:`send_message`, :meth:`interrupt` or :meth:`cancel`, and ``await run.wait()`` for the result.
    Leaving the ``async with`` block stops the agent if it is still running; no process outlives it.

    ``streaming``: the caller takes every patch as it comes and keeps what it needs itself (it
    shows them, stores them), as ``replay(..., streaming=True)``: the run keeps only the last
    ``window`` entries (:data:`~orchestrate.normalizers.base.DEFAULT_WINDOW` when not given) and
    the tool calls still open, so its memory stays flat however many entries the agent makes.
    The result's figures are still the whole run's; its ``entries``, ``tool_results`` and
    :attr:`entries` are only what is kept (see :class:`RunResult`).  A line that changes an entry
    older than the window which is not an open tool call (rare) is an ``entry_released`` error
    entry instead.  By default every entry is kept."""

    def __init__(
        self,
        executor: Executor,
        task: Task,
        approvals: ApprovalService | None = None,
        shutdown: ShutdownPolicy | None = None,
        *,
        streaming: bool = False,
        window: int | None = None,
    ) -> None:
        if task.workspace != "here":  # silently running in cwd would defeat the point of asking
            raise ConfigError(
                f"Task.workspace={task.workspace!r}: a Run works in task.cwd as given; the engine (or "
                "orchestrate run --worktree) makes the workspace, or see orchestrate.workspace"
            )
        self.executor = executor
        self.task = task
        # One pipeline for every executor: deny rules, "always" memory, policy, person.
        self.approvals: ApprovalService = ApprovalPipeline.around(approvals or AutoDeny())
        self.shutdown_policy = shutdown or ShutdownPolicy()
        self._normalizer: Normalizer | None = None  # made just after the spawn (see normalizer)
        self._tally: EntryTally | None = None  # ... with it: the result's figures of every entry
        if window is not None and window < 1:
            raise ValueError("window must be positive")
        self._window = window if streaming else None
        self.streaming = streaming
        self._prestarted: Prestarted | None = None
        self._opening: object = None  # what an adopted process was sent early (see adopt)
        self._written: list[tuple[bytes, float]] = []
        self.raw_log_path = task.raw_log or default_log_dir() / _log_name(executor.name)
        self._spec = executor.process_spec(task, self.approvals)  # fails early: unknown binary, bad options
        self._patches = PatchQueue()
        self._done = anyio.Event()
        self._result: RunResult | None = None
        self._driver: Driver[Any] | None = None
        self._process: AgentIO | None = None
        self._scope: anyio.CancelScope | None = None
        self._stack: AsyncExitStack | None = None
        self._rawlog: RawLogWriter | None = None
        self._stop_reason: Outcome | None = None
        self._unsent: list[str] = []  # what the driver still held when the run was stopped
        self._output_seen = False  # any output from the agent in this attempt yet
        self._started = time.monotonic()
        self._last_ts: datetime | None = None
        self.pids: list[int] = []
        """The agent process of each attempt; each leads its own process group."""

    def adopt(self, prestarted: Prestarted) -> bool:
        """Let the first attempt take over an agent process already started (the CLI's early
        start, process/prestart.py) instead of spawning one: only if it runs exactly this run's
        command line, directory and environment, and the executor prepares nothing before a
        start; and, if its first lines were written early, only if this run's driver would have
        written exactly those: a handshake to an agent that takes one, or a prompt to an agent
        that asks before every tool that changes anything (run/early_opening.py).  Otherwise it
        is discarded, killed at once with its whole tree, and the run spawns its own
        (:attr:`early_refused` says why).  True when adopted."""
        plain = not type(self.executor).prepares(self.task.resume) and self.executor.transport == "pipes"
        if self._prestarted is not None or not plain:
            why: str | None = "the run was started another way"
        elif prestarted.spec != self._spec:
            why = "the run computed another command line, directory or environment"
        else:
            why = self._opened_as_ours(prestarted)
        if why is not None:
            self.early_refused = why
            prestarted.discard()
            return False
        self._prestarted = prestarted
        return True

    early_refused: str | None = None
    """Why an agent started early was not adopted (None: it was, or there was none)."""

    def _opened_as_ours(self, prestarted: Prestarted) -> str | None:
        """None when what was written to ``prestarted`` early (if anything) is what this run would
        write first, to an agent that may be sent it before adoption; else why not."""
        if not prestarted.was_written:
            return None
        from .early_opening import refused_opening
        from .protocols import driver_class

        opening = prestarted.opening
        written = tuple(data for data, _ in prestarted.written)
        if opening is None or written != getattr(opening, "lines", None):
            return "its first message was not written whole"
        prompt = getattr(opening, "prompt", None)  # (None: a handshake, no prompt in it)
        if prompt is not None and prompt != self.task.prompt:
            return "it was sent another prompt"
        try:
            takes = driver_class(self.executor).takes_opening(opening)
        except ConfigError as exc:
            return str(exc)
        if not takes:
            return "this run's driver writes its first message another way"
        return refused_opening(self.executor, self._spec, opening)

    # --- the handle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Run:
        header = {
            "executor": self.executor.name,
            "argv": self._spec.argv,
            "cwd": str(self._spec.cwd),
            "started": datetime.now(UTC).isoformat(),
        }
        try:
            self._rawlog = self._open_log(header)
        except BaseException:
            if self._prestarted is not None:
                self._prestarted.discard()
            raise
        self._logged()
        try:
            self._prepare(self._spec, self.task)
            # Spawned here, not in the loop, so a CLI that cannot start raises SpawnError to the caller.
            first = await self._spawn()
            self.normalizer  # noqa: B018 - its modules load now, while the agent starts up
        except BaseException:
            self._rawlog.close()
            if self._prestarted is not None:
                self._prestarted.discard()
            raise
        self._stack = AsyncExitStack()
        tg = await self._stack.enter_async_context(anyio.create_task_group())
        tg.start_soon(self._main, first)
        tg.start_soon(self._flush_log)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._done.is_set():
            self.cancel()
        assert self._stack is not None
        try:
            await self._stack.__aexit__(et, exc, tb)
        finally:
            self._patches.discard()

    async def patches(self) -> AsyncIterator[EntryPatch]:
        """Every entry patch of the run, live, in order; ends when the run ends.  Patches are
        delivered once: a second iteration continues where an earlier one stopped.  A caller that
        reads slower than the agent writes gets the latest state of each entry it has not read yet,
        not every step in between (memory follows the entries, not the text deltas).  After the
        ``async with`` block, use :attr:`entries` or the result instead."""
        while (patch := await self._patches.get()) is not None:
            yield patch

    async def wait(self) -> RunResult:
        """Wait for the run to end and return its result.  (A streaming run no longer waits for its
        caller to read its patches from then on: a caller that waits for the end may not read.)"""
        self._patches.release()
        await self._done.wait()
        assert self._result is not None
        return self._result

    async def wait_idle(self) -> bool:
        """With ``keep_open``: wait until the agent has answered everything sent to it (True: its
        turn is over and it waits for a message), or until the run has ended (False)."""
        while not self._done.is_set():
            driver = self._driver
            if driver is None:  # not started yet: its first attempt is a moment away
                await anyio.sleep(0.01)
                continue
            if driver.is_idle:
                return True
            async with anyio.create_task_group() as tg:

                async def on(event: Callable[[], Awaitable[Any]]) -> None:
                    await event()
                    tg.cancel_scope.cancel()

                tg.start_soon(on, driver.wait_idle)
                tg.start_soon(on, self._done.wait)
        return False

    @property
    def capabilities(self) -> Capabilities:
        """What this agent can do: as the executor declares it, or as the agent itself said when it
        started (a generic ACP agent's initialize answer)."""
        return self._driver.capabilities if self._driver is not None else self.executor.capabilities

    @property
    def normalizer(self) -> Normalizer:
        """The executor's normalizer for this run (made once, just after the agent is spawned)."""
        if self._normalizer is None:
            normalizer = self.executor.create_normalizer()
            normalizer.work_dir = str(self.task.cwd)  # tool paths are shown relative to it
            if self.streaming:  # each entry let go of is counted in the figures as it goes
                from ..normalizers.base import DEFAULT_WINDOW

                window = self._window or DEFAULT_WINDOW
                normalizer.bound(window)
                normalizer.log.on_release(self._released)
                self._patches.bound(_UNREAD_WINDOWS * window)
            self._normalizer = normalizer
        return self._normalizer

    def _figures(self) -> EntryTally:
        """The tally of the result's figures (made when first needed: the first entry let go of,
        or the end)."""
        if self._tally is None:
            from .tally import EntryTally

            self._tally = EntryTally()
        return self._tally

    def _released(self, entry: NormalizedEntry) -> None:
        self._figures().see(entry)

    @property
    def entries(self) -> list[NormalizedEntry]:
        """The entries so far: every one, or, streaming, those still kept (see the class)."""
        return list(self.normalizer.entries)

    async def send_message(self, text: str) -> None:
        """A follow-up user message while the agent lives (queued by the agent if it is busy)."""
        driver = self._live_driver()
        await driver.send_message(text)

    def unsent(self) -> list[str]:
        """The follow-up messages the agent was never sent: held by its driver for a next turn that
        did not come (the run ended first: a time limit, a crash, a cancel), in order.  Empty for
        drivers that hold none."""
        if self._unsent:
            return list(self._unsent)
        return self._driver.unsent() if self._driver is not None else []

    async def interrupt(self) -> list[str]:
        """Stop the current turn the agent's own way; the run then ends as ``interrupted``.  Returns
        the follow-up messages the agent was never sent (held for a next turn it will not have), in
        order, for a caller that must not lose them (the engine puts steered ones back)."""
        driver = self._live_driver(input=False)
        self._stop_reason = self._stop_reason or "interrupted"
        dropped = driver.unsent()
        await driver.interrupt()
        return dropped

    async def set_permission_mode(self, mode: str) -> None:
        """Change the agent's own permission mode for the rest of the run (Claude: default,
        acceptEdits, plan, bypassPermissions ...)."""
        await self._live_driver().set_permission_mode(mode)

    async def end_input(self) -> None:
        """With ``keep_open``: no more messages; let the agent finish and exit."""
        await self._live_driver().end_input()

    def cancel(self) -> None:
        """Stop now: the shutdown ladder runs and the run ends as ``cancelled``."""
        self._stop_reason = self._stop_reason if self._stop_reason == "interrupted" else "cancelled"
        if self._scope is not None:
            self._scope.cancel()

    def _live_driver(self, *, input: bool = True) -> Driver[Any]:
        """The driver of the live process; ``input``: one that still takes messages."""
        process = self._process
        if self._done.is_set() or self._driver is None or process is None or process.returncode is not None:
            raise RunClosedError("the run has ended; start a new one (resume its session to continue)")
        if input and self._driver.input_closed:
            raise RunClosedError("the agent's input is closed; start a new run that resumes its session")
        return self._driver

    # --- the loop -----------------------------------------------------------------------------

    async def _main(self, first: AgentIO) -> None:
        assert self._rawlog is not None
        try:
            await self._attempt(self.task, first)
            if self._should_fall_back():
                fresh = self.task.model_copy(update={"resume": None, "fork": False})
                self._spec = self.executor.process_spec(fresh, self.approvals)
                reason = f"Session {self.task.resume} was not found; starting a fresh session"
                self._note(Restart(tuple(self._spec.argv), reason))
                await self._attempt(fresh, None)
        finally:  # no await in here: it runs to the end even when the run is being cancelled
            self._rawlog.close()
            self._logged()  # a failure to write the last records is still an entry
            self._emit(self.normalizer.finish(self._last_ts))
            self._result = self._make_result()
            self._patches.close()
            self._done.set()

    async def _spawn(self) -> AgentIO:
        if self._prestarted is not None:  # started before the event loop: taken over, not spawned
            prestarted, self._prestarted = self._prestarted, None
            adopted = await AgentProcess.adopt(prestarted, STDOUT_PIPE_BYTES)
            if prestarted.written:  # the first attempt records them and hands the driver its state
                self._opening, self._written = prestarted.opening, list(prestarted.written)
            return adopted
        if self.executor.transport == "pty":
            from ..process.pty import PtyAgentProcess  # ptyprocess: only for terminal agents

            return await PtyAgentProcess.spawn(self._spec, self.executor.terminal_size)
        return await AgentProcess.spawn(self._spec, STDOUT_PIPE_BYTES)

    def _prepare(self, spec: ProcessSpec, task: Task) -> None:
        try:
            done = self.executor.prepare(spec, task)
        except OSError as exc:
            done = [f"could not prepare: {exc}"]
        if done:
            self._note(Prepared(tuple(done)))

    async def _attempt(self, task: Task, process: AgentIO | None) -> None:
        from .driver import DriverContext
        from .protocols import start_driver

        if process is None:
            self._prepare(self._spec, task)
            try:
                process = await self._spawn()
            except SpawnError as exc:
                self._note(RunError("spawn_failed", str(exc)))
                return
        self._process = process
        self.pids.append(process.pid)
        process.on_write = self._wrote
        opening, written = self._opening, self._written
        self._opening, self._written = None, []
        for data, ts in written:  # written before adoption: recorded as the run's own writes
            self._wrote(data, ts)
        # Bounded: when the read loop falls behind, the pump stops reading, the pipe fills and the
        # agent waits on its writes; a fast agent never grows our memory.
        chunks_in, chunks_out = anyio.create_memory_object_stream[Chunk](_CHUNK_BUFFER)
        eof = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                ctx = DriverContext(
                    self.executor,
                    task,
                    process,
                    self.approvals,
                    tg,
                    self._note,
                    lambda: self.normalizer.log.session_id,
                )
                driver = self._driver = start_driver(ctx)
                if opening is not None:
                    driver.take_opening(opening)  # (Run.adopt checked that it takes it)
                tg.start_soon(process.pump, chunks_in)
                tg.start_soon(self._consume, chunks_out, driver, eof)
                self._output_seen = False
                if task.startup_timeout is not None:
                    tg.start_soon(self._startup_watchdog, task.startup_timeout)
                with anyio.CancelScope() as self._scope:
                    if self._stop_reason == "cancelled":  # cancel() came before the scope existed
                        self._scope.cancel()
                    await self._converse(driver, task, eof)
                if not eof.is_set():  # cancelled or timed out: the ladder, still reading as it goes
                    self._unsent = driver.unsent()  # (its first rung, the interrupt, drops them)
                    await process.shutdown(self.shutdown_policy, interrupt=driver.interrupt)
                with anyio.move_on_after(_EOF_GRACE):
                    await eof.wait()
                tg.cancel_scope.cancel()  # approvals still waiting on a dead process
        finally:
            rc = await process.shutdown(self.shutdown_policy)
            self._scope = None
            self._after_exit(rc, process.stderr_tail)

    async def _converse(self, driver: Driver[Any], task: Task, eof: anyio.Event) -> None:
        remaining = None if task.timeout is None else task.timeout - (time.monotonic() - self._started)
        try:
            with anyio.fail_after(math.inf if remaining is None else max(remaining, 0.0)):
                try:
                    await driver.start(task.prompt)
                except ProcessExitedError:
                    pass  # the exit is reported with its code and stderr once the process is reaped
                except Exception as exc:  # an answer of the wrong shape, too, ends the conversation
                    # (imported here: a Claude run, which speaks no JSON-RPC, never loads it)
                    from .jsonrpc import JsonRpcError

                    if not isinstance(exc, JsonRpcError):  # (its error answer is in the entries)
                        known = isinstance(exc, OrchestrateError)
                        detail = str(exc) if known else f"{type(exc).__name__}: {exc}"
                        message = f"starting the conversation failed: {detail}"
                        self._note(RunError("protocol_error", message))
                    driver.set_idle(True)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._close_when_idle, driver, task, eof)
                    await eof.wait()
                    tg.cancel_scope.cancel()
        except TimeoutError:
            self._stop_reason = "timed_out"
            self._note(RunError("timeout", f"the run exceeded its time limit of {task.timeout:g} s"))

    async def _startup_watchdog(self, seconds: float) -> None:
        """No output at all within ``seconds`` of the spawn (a CLI stuck before it says anything: a
        download, a lock, a dead dependency): the run stops as timed out, with its own code.  The
        attempt's task group cancels this when the attempt ends."""
        await anyio.sleep(seconds)
        if self._output_seen or self._scope is None:
            return
        self._stop_reason = "timed_out"
        message = f"the agent printed nothing within {seconds:g} s of starting"
        self._note(RunError("startup_timeout", message))
        self._scope.cancel()

    async def _close_when_idle(self, driver: Driver[Any], task: Task, eof: anyio.Event) -> None:
        if task.keep_open:
            return
        await driver.wait_idle()
        await driver.end_input()
        # An agent that does not exit at the end of its input is stopped by the ladder.
        with anyio.move_on_after(self.shutdown_policy.stdin_grace):
            await eof.wait()
        if not eof.is_set() and self._scope is not None:
            self._scope.cancel()

    async def _consume(
        self, chunks: MemoryObjectReceiveStream[Chunk], driver: Driver[Any], eof: anyio.Event
    ) -> None:
        keep = driver.wants if driver.reads_lines else None  # (None: no question per line)
        try:
            async with chunks:
                async for chunk in chunks:
                    # Framed and parsed once, by the normalizer's wire (the code a replay runs); the
                    # driver's peer reads those same lines, never the bytes again.
                    lines = self._feed(chunk, keep if chunk.stream == "stdout" else None)
                    self._output_seen = True  # a sign of life, for the start-up watchdog
                    if chunk.stream == "stdout":
                        await self._to_driver(driver.on_output, chunk.data)
                        for line in lines:
                            await self._to_driver(driver.on_line, line)
                    await self._patches.room(_STALL)  # (at once, unless a streaming caller lags)
        finally:
            driver.on_eof()
            eof.set()

    async def _to_driver(self, handler: Callable[[_T], Awaitable[None]], data: _T) -> None:
        # The one place the drivers' side of a line is guarded, as the normalizers' is in theirs:
        # whatever a line does to a driver costs that line, never the run.
        try:
            await handler(data)
        except Exception as exc:
            if self.normalizer.strict:
                raise
            shown = data.text if isinstance(data, WireLine) else data.decode("utf-8", "replace")
            message = f"the driver could not handle a line and skipped it ({type(exc).__name__}: {exc})"
            self._note(RunError("protocol_error", message[:500], line=shown[:2048]))

    # Everything the normalizer sees goes through these two, which log it first: the raw log's
    # order is the normalizer's order, so a replay reproduces the live entries exactly.

    def _feed(self, chunk: Chunk, keep: Callable[[WireLine], bool] | None = None) -> list[WireLine]:
        """Log ``chunk``, hand it to the normalizer, and return the lines ``keep`` wants, parsed
        once by the normalizer's wire (for the driver's peer)."""
        if self._rawlog is not None:
            self._rawlog.chunk(chunk.stream, chunk.data, chunk.ts)
        self._last_ts = _ts(chunk.ts)
        lines, patches = self.normalizer.feed_wire(chunk.data, chunk.stream, self._last_ts, keep)
        self._emit(patches)
        self._logged()
        return lines

    def _wrote(self, data: bytes, ts: float) -> None:
        self._feed(Chunk("stdin", data, ts))  # (what we wrote: the normalizer reads our requests)

    def _note(self, event: Note) -> None:
        now = time.time()
        if self._rawlog is not None:
            self._rawlog.event(event.to_json(), now)
        self._last_ts = _ts(now)
        self._emit(self.normalizer.note(event, self._last_ts))
        self._logged()

    # The raw log: private, redacted unless asked otherwise, batched; it never takes the run down.

    def _open_log(self, header: dict[str, Any]) -> RawLogWriter:
        redactor = None
        if self.task.redact_raw_log and redaction_enabled(os.environ):
            mcp_envs = [
                {k: v for k, v in (spec.get("env") or {}).items() if isinstance(v, str)}
                for spec in self.executor.options.mcp_servers.values()
                if isinstance(spec, dict)
            ]
            redactor = Redactor.for_environment(os.environ, self._spec.env, *mcp_envs)
        return RawLogWriter(
            self.raw_log_path,
            header,
            redactor=redactor,
            screen=self.executor.transport == "pty",  # every note reads the screen as it is
            private_dir=self.task.raw_log is None,
        )

    def _logged(self) -> None:
        """After each record: write the batch at a turn's end, and report a failed log once."""
        log = self._rawlog
        if log is None:
            return
        turns = self._normalizer.turn_statuses if self._normalizer is not None else ()  # none yet
        if len(turns) != self._turns:
            self._turns = len(turns)
            log.flush()
        failure = log.take_failure()
        if failure is not None:  # noted after the log is off: this note is shown, not written
            self._note(RunError(RAW_LOG_FAILED, failure))

    async def _flush_log(self) -> None:
        # Records wait in memory for a turn's end; a quiet agent's last ones reach the disk anyway.
        while not self._done.is_set():
            with anyio.move_on_after(FLUSH_SECONDS):
                await self._done.wait()
            if self._rawlog is not None and not self._done.is_set():
                self._rawlog.flush()
                self._logged()

    _turns = 0

    def _emit(self, patches: list[EntryPatch]) -> None:
        for patch in patches:
            self._patches.put(patch)

    def _after_exit(self, rc: int | None, stderr_tail: str) -> None:
        self._note(Exit(rc))
        # We ended its input after a failure the entries already show: a clean exit is no news.
        driver = self._driver
        expected = driver is not None and driver.input_closed and (rc == 0 or driver.ended_by_client)
        if self._stop_reason is None and self.normalizer.outcome is None and not expected:
            message = f"the agent exited with code {rc} before finishing its turn" + (
                f": {_last_line(stderr_tail)}" if stderr_tail.strip() else ""
            )
            self._note(RunError("process_exited", message, stderr_tail=stderr_tail or None))
        self._exit_code, self._stderr_tail = rc, stderr_tail

    _exit_code: int | None = None
    _stderr_tail: str = ""

    def _should_fall_back(self) -> bool:
        if not (self.task.resume and self.task.resume_fallback and self._stop_reason is None):
            return False
        # (the entries a streaming run let go of were told to the tally; the rest are here)
        released = self._tally is not None and self._tally.resume_failed
        return released or any(
            e.type.kind == "error" and e.type.error.code == "resume_failed" for e in self.normalizer.entries
        )

    def _make_result(self) -> RunResult:
        from .result import RunResult

        entries = list(self.normalizer.entries)
        tally = self._figures()
        # One pass, by each entry's kind (its discriminator): an isinstance check against a model
        # class goes through pydantic's metaclass, 0.3 us an entry.  The tally has seen the entries
        # a streaming run let go of already; these are the rest.
        tools: list[ToolUseEntry] = []
        for entry in entries:
            tally.see(entry)
            of = entry.type
            if of.kind == "tool_use":
                tools.append(of.tool)
        outcome = self._outcome()
        return RunResult(
            outcome=outcome,
            exit_code=self._exit_code,
            session_id=self.normalizer.log.session_id,
            entries=entries,
            tool_results=tools,
            token_usage=tally.token_usage(),
            raw_log=self.raw_log_path if self._rawlog is not None and self._rawlog.opened else None,
            stderr_tail=self._stderr_tail,
            error=tally.error,
            entry_count=tally.count,
            reported_usage=tally.reported_usage(),
            approvals_timed_out=tally.approvals_timed_out,
            failure=tally.failure(outcome, self._stderr_tail),
        )

    def _outcome(self) -> Outcome:
        if self._stop_reason in ("cancelled", "timed_out"):
            return self._stop_reason
        agent = self.normalizer.outcome
        if self._stop_reason == "interrupted" and agent != "success":
            return "interrupted"
        return agent or "failed"


def _ts(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _log_name(executor: str) -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{executor}-{secrets.token_hex(3)}.jsonl"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
