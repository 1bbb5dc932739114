"""The live, protocol-specific half of a run: what to write, and how to answer what the agent asks."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

import anyio
from anyio.abc import TaskGroup

from ..approvals.base import ApprovalDecision, ApprovalService
from ..errors import ConfigError, OrchestrateError
from ..executors.base import Capabilities, Executor
from ..process.base import AgentIO
from ..task import Task
from ..wire.lines import WireLine
from ..wire.notes import Approval, Note, RunError

__all__ = ["Driver", "DriverContext"]


X = TypeVar("X", bound=Executor)


@dataclass
class DriverContext(Generic[X]):
    """What a driver may use.  ``note`` records a client decision in the raw log and the entries."""

    executor: X
    task: Task
    process: AgentIO
    approvals: ApprovalService
    task_group: TaskGroup
    note: Callable[[Note], None]
    session_id: Callable[[], str | None]


class Driver(abc.ABC, Generic[X]):
    """One agent process's conversation, for executors of class ``X`` (which the driver receives
    typed: :mod:`.protocols` checks it once).  Sees every stdout line after the normalizer has."""

    def __init__(self, ctx: DriverContext[X]) -> None:
        self.ctx = ctx
        self.capabilities: Capabilities = ctx.executor.capabilities
        """What the agent can do; a driver may learn more from the agent itself."""
        self.is_idle = False
        """True when the agent has answered everything sent to it and waits for more."""
        self.input_closed = False
        self.ended_by_client = False
        """True when the client stopped the agent itself after its input closed (an agent that does
        not exit on end of input): its exit code is then no failure."""
        self._idle_changed = anyio.Event()

    def set_idle(self, idle: bool) -> None:
        self.is_idle = idle
        changed, self._idle_changed = self._idle_changed, anyio.Event()
        changed.set()

    async def wait_idle(self) -> None:
        while not self.is_idle:
            await self._idle_changed.wait()

    def note_decision(
        self,
        request_id: str,
        decision: ApprovalDecision,
        *,
        question: str | None = None,
        path: str | None = None,
        command: str | None = None,
    ) -> None:
        """Record how a permission request (or, with ``question``, another question to the person)
        was answered: the raw log's ``approval`` note."""
        self.ctx.note(
            Approval(
                request_id,
                decision.status,
                decision.reason,
                decision.for_session,
                decision.interrupt,
                question=question,
                path=path,
                command=command,
            )
        )

    @abc.abstractmethod
    async def start(self, prompt: str) -> None:
        """Open the conversation and send the first prompt."""

    @classmethod
    def takes_opening(cls, opening: object) -> bool:
        """Whether this driver can take over ``opening``: the first lines its agent was sent before
        the run adopted the process (the CLI's early start, run/early_opening.py), made by this
        driver's own code.  No driver does unless it says so."""
        return False

    def take_opening(self, opening: object) -> None:
        """Take over ``opening`` (:meth:`takes_opening` said it can): the driver's state becomes
        what writing those lines itself would have left, and :meth:`start` writes nothing."""
        raise ConfigError(f"{type(self).__name__} takes over no opening")

    async def on_output(self, data: bytes) -> None:
        """A chunk of what the agent printed, as it came (before lines are cut from it)."""

    reads_lines: ClassVar[bool] = True
    """False for a driver whose :meth:`on_line` does nothing: its lines are then not asked about
    one by one (:meth:`wants`), a call per line of a live run saved."""

    def wants(self, line: WireLine) -> bool:
        """Whether :meth:`on_line` needs this stdout line (asked as the normalizer reads it: the
        lines a driver ignores are not held for it).  Every line, unless a driver says less."""
        return self.reads_lines

    @abc.abstractmethod
    async def on_line(self, line: WireLine) -> None:
        """One complete stdout line, parsed once by the wire (the normalizer has seen the same
        event).  Must not block on anything slow (approvals run as tasks)."""

    @abc.abstractmethod
    async def send_message(self, text: str) -> None:
        """A follow-up user message, while the process lives."""

    @abc.abstractmethod
    async def interrupt(self) -> None:
        """Ask the agent to stop the current turn (the protocol's own interrupt)."""

    def unsent(self) -> list[str]:
        """Messages :meth:`send_message` took that the agent has not been sent yet (held for the
        next turn); :meth:`interrupt` drops them.  None, unless a driver holds messages."""
        return []

    def on_eof(self) -> None:
        """The agent's stdout closed: nothing more will come (fail what still waits for it)."""

    def background(self, work: Callable[[], Awaitable[None]], what: str) -> None:
        """Run ``work`` beside the read loop (it may await the agent's answers, which the read loop
        delivers); a failure becomes a ``run_error`` entry instead of tearing the run down (an
        answer of the wrong shape fails with a KeyError or TypeError as surely as an error does)."""

        async def guarded() -> None:
            try:
                await work()
            except Exception as exc:
                detail = str(exc) if isinstance(exc, OrchestrateError) else f"{type(exc).__name__}: {exc}"
                self.ctx.note(RunError("protocol_error", f"{what}: {detail}"))
                self.set_idle(True)

        self.ctx.task_group.start_soon(guarded)

    async def set_permission_mode(self, mode: str) -> None:
        """Change the agent's own permission mode mid-run, where its protocol can."""
        raise ConfigError(f"{self.ctx.executor.name} cannot change its permission mode mid-run")

    async def end_input(self) -> None:
        """No more messages will come: let the agent finish and exit."""
        self.input_closed = True
        await self.ctx.process.close_stdin()
