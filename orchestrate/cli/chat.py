"""A conversation on the terminal: `orchestrate chat -e NAME` and `orchestrate run --interactive`.

One agent process for the whole conversation (``Task.keep_open``): after each turn the person types
the next message on the terminal (the same one approvals are asked on), and it goes to the agent
as a follow-up in the same session.  Keys:

- Ctrl-C during a turn interrupts the turn the agent's own way (or, with a question open, answers it
  "no, and stop the turn") and comes back to the input; a second Ctrl-C in the same turn quits at once.
- Ctrl-C or Ctrl-D at the input quits: the agent's input is closed, it ends its session cleanly.
- SIGTERM or a closed terminal (SIGHUP) quits at once.

An agent that takes one prompt per process (``codex exec``, ``cursor-agent -p``) holds the same
conversation by resume (:func:`converse_by_resume`): each message typed starts a new process that
resumes the session the previous turn reported, its entries shown in the same view after the earlier
turns'; Ctrl-C interrupts that process the agent's own way (SIGINT) and comes back to the input.  Only
an agent with neither mid-run messages nor session resume cannot hold a conversation.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio

from ..approvals import TerminalPrompt
from ..entries import EntryPatch
from ..errors import OrchestrateError
from ..process.containment import kill_all
from ..run import Run, RunResult
from .live import LiveView

__all__ = ["INPUT_PROMPT", "Conversation", "converse", "converse_by_resume", "resume_command"]

INPUT_PROMPT = "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "  # the input line, as agent CLIs draw it
_END_GRACE = 10.0  # seconds for the agent to end its session once its input is closed
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class Conversation:
    """How a conversation ended: the run's result, and the signal that stopped it (None when the
    person quit at the input, or the agent ended on its own)."""

    result: RunResult
    stopped_by: signal.Signals | None = None
    quit_at_input: bool = False
    session_id: str | None = None
    """The session to resume it by: the last one a turn reported (None: no turn reported one)."""

    def __post_init__(self) -> None:
        self.session_id = self.session_id or self.result.session_id


@dataclass
class _State:
    in_turn: bool = True
    interrupting: bool = False
    stopped_by: signal.Signals | None = None
    quit_asked: bool = False  # Ctrl-C between a turn's end and the input line being shown


async def converse(
    run: Run,
    view: object,
    asker: TerminalPrompt,
    sink: Callable[[EntryPatch], None],
    tell: Callable[[str], None],
) -> Conversation:
    """Hold the conversation on ``run`` (started with ``keep_open``): its patches go to ``sink``, the
    CLI's own notices to ``tell``; the next messages are read through ``asker``."""
    state = _State()
    drained = anyio.Event()

    async def pump() -> None:
        try:
            async for patch in run.patches():
                sink(patch)
        finally:
            drained.set()

    async with run, anyio.create_task_group() as tg:
        tg.start_soon(pump)
        tg.start_soon(_on_signals, lambda: run, asker, state, tell)
        if isinstance(view, LiveView):
            tg.start_soon(view.tick)
        quit_at_input = await _turns(run, view, asker, state)
        if quit_at_input:
            await _end(run)
        result = await run.wait()
        await drained.wait()  # every patch shown before the summary
        tg.cancel_scope.cancel()
    return Conversation(result, state.stopped_by, quit_at_input)


async def converse_by_resume(
    first: Run,
    follow_up: Callable[[Run, str, str | None], Run],
    view: object,
    asker: TerminalPrompt,
    sink: Callable[[EntryPatch], None],
    tell: Callable[[str], None],
) -> Conversation:
    """The conversation with an agent that takes one prompt per process: ``first`` is the first
    turn's run (not entered yet); ``follow_up(previous run, message, session)`` makes the run of the
    next message, resuming ``session`` (None: a fresh one).  Every turn's patches go to ``sink``,
    numbered after the earlier turns' entries so the view keeps them all."""
    state = _State()
    current = first
    offset = 0  # entries shown by the earlier turns
    session: str | None = None
    known: str | None = None  # the last session any turn reported: what the resume command names
    talk: Conversation | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_on_signals, lambda: current, asker, state, tell)
        if isinstance(view, LiveView):
            tg.start_soon(view.tick)
        while True:
            state.in_turn, state.interrupting = True, False
            try:
                result = await _one_turn(current, _shifted(sink, offset))
            except OrchestrateError as exc:
                if current is first:
                    raise  # nothing has run yet: the CLI's own error, as for `run`
                tell(f"cannot start the next turn: {exc}")  # the conversation so far still ends well
                break
            offset += result.entry_count  # (all it made: a streaming run keeps only the last)
            session = result.session_id or None
            known = session or known
            talk = Conversation(result, state.stopped_by, session_id=known)
            if state.stopped_by is not None:
                break
            state.in_turn = False
            if session is None:
                tell("this turn reported no session id: the next message starts a new session")
            line = await _next_message(view, asker, state)
            if line is None or state.stopped_by is not None:
                talk.quit_at_input = state.stopped_by is None
                talk.stopped_by = state.stopped_by
                break
            try:
                current = follow_up(current, line, session)
            except OrchestrateError as exc:
                tell(f"cannot start the next turn: {exc}")
                break
        tg.cancel_scope.cancel()
    assert talk is not None  # the first turn ran, or raised
    return talk


async def _one_turn(run: Run, sink: Callable[[EntryPatch], None]) -> RunResult:
    """One process, one turn: every patch shown, then its result."""
    async with run:
        async for patch in run.patches():
            sink(patch)
        return await run.wait()


def _shifted(sink: Callable[[EntryPatch], None], offset: int) -> Callable[[EntryPatch], None]:
    """``sink`` for a later turn's patches: its entries numbered after the ``offset`` shown before."""
    if not offset:
        return sink

    def shifted(patch: EntryPatch) -> None:
        index = patch.index + offset
        entry = patch.entry.model_copy(update={"index": index})
        sink(patch.model_copy(update={"index": index, "entry": entry}))

    return shifted


async def _next_message(view: object, asker: TerminalPrompt, state: _State) -> str | None:
    """The next message typed at the input (an empty line asks again); None: the person quit."""
    while True:
        with _between_turns(view):
            line = None if state.quit_asked else await asker.read_line(INPUT_PROMPT)
        if line is None or state.stopped_by is not None:
            return None
        if line:
            return line


async def _turns(run: Run, view: object, asker: TerminalPrompt, state: _State) -> bool:
    """Turn after turn until the person quits at the input (True) or the run ends (False)."""
    while True:
        state.in_turn, state.interrupting = True, False
        if not await run.wait_idle():
            return False  # the agent ended, or a second Ctrl-C stopped it
        state.in_turn = False
        while True:
            with _between_turns(view):
                line = None if state.quit_asked else await asker.read_line(INPUT_PROMPT)
            if line is None or state.stopped_by is not None:
                return state.stopped_by is None
            if line:
                break  # an empty line is no message: ask again
        try:
            await run.send_message(line)
        except OrchestrateError:
            return False  # the agent is gone; the result says why


@contextlib.contextmanager
def _between_turns(view: object) -> Iterator[None]:
    if isinstance(view, LiveView):
        with view.between_turns():
            yield
        return
    finish = getattr(view, "finish", None)
    if finish is not None:
        with contextlib.suppress(OSError):
            finish()  # the turn's last line and notices, before the input line
    yield


async def _end(run: Run) -> None:
    """The person quit: close the agent's input so it ends its session its own way; stop it if it
    has not ended within the grace."""
    try:
        await run.end_input()
    except OrchestrateError:
        return  # already ended
    with anyio.move_on_after(_END_GRACE):
        await run.wait()
        return
    run.cancel()


async def _on_signals(
    current: Callable[[], Run], asker: TerminalPrompt, state: _State, tell: Callable[[str], None]
) -> None:
    """The keys and signals of a conversation, acting on ``current()``: the run of this turn."""
    with anyio.open_signal_receiver(*_SIGNALS) as signals:
        async with anyio.create_task_group() as tg:
            async for sig in signals:
                run = current()
                if sig != signal.SIGINT or (state.in_turn and state.interrupting):
                    state.stopped_by = state.stopped_by or sig
                    tell("stopping now" if sig == signal.SIGINT else f"{sig.name}: stopping now")
                    asker.interrupt()  # a question or the input line, if one is open
                    run.cancel()
                    kill_all()  # now: every process of the run, not the polite ladder
                elif not state.in_turn:
                    state.quit_asked = not asker.interrupt()  # Ctrl-C at the input: quit
                else:
                    state.interrupting = True
                    tell("Ctrl-C: interrupting the turn (Ctrl-C again to quit)")
                    if not asker.interrupt():  # a question open is answered "no, and stop the turn"
                        tg.start_soon(_interrupt, run)


async def _interrupt(run: Run) -> None:
    with contextlib.suppress(OrchestrateError):
        await run.interrupt()


def resume_command(executor: str, session_id: str | None, options: dict[str, str | None]) -> str | None:
    """The command that continues this conversation: ``orchestrate chat -e NAME --resume ID`` with the
    options it needs to find the same agent and folder; None without a session to resume."""
    if not session_id:
        return None
    words = ["orchestrate", "chat", "-e", executor]
    for flag, value in options.items():
        if value is not None:
            words += [flag, value]
    words += ["--resume", session_id]
    return shlex.join(words)


def cwd_option(cwd: Path) -> str | None:
    """``--cwd`` for the resume command, when it is not where the command is typed."""
    return None if cwd == Path.cwd().resolve() else str(cwd)
