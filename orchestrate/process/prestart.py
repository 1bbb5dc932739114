"""An agent started before any event loop exists, contained as any other, adopted by a run later.

``orchestrate run`` spends a few hundred milliseconds importing (click, pydantic, anyio and
asyncio, the run and its approvals) before it could spawn the agent, and the agent's own start-up
(a Node CLI: about as long again) only began after that.  The CLI's early start (cli/early.py)
spawns the agent's supervisor with :func:`standby` first thing instead, before it has even loaded
the executor's code, sends it the agent's command line, directory and environment once they are
known (:meth:`Standby.start`: the supervisor's own start overlaps that work), and the run takes the
process over with :meth:`AgentProcess.adopt <orchestrate.process.pipes.AgentProcess.adopt>` once
everything is loaded and checked, so the start-ups overlap.  A supervisor that is never told what
to start (:meth:`Standby.discard`: the early start did not apply after all) exits when its control
socket closes, having started nothing.

Containment is the same from the first instruction the agent runs: the supervisor, its subreaper,
``PR_SET_PDEATHSIG`` and the cgroup (containment.py); a start that is never adopted is ended by
:meth:`Prestarted.discard`, and if we die first the supervisor sees its control socket close and
kills the tree.  What it prints meanwhile waits in the pipe for the run, which records it in the
raw log from the first byte.

Nothing is written to the agent here unless the early start asks for it (:meth:`Prestarted.write`:
the first message of an agent that asks before every tool that changes anything, run/early_opening.py
says which); the run that adopts it records those bytes as its own (:attr:`Prestarted.written`).
A start that was written to and is then discarded is killed at once, whole tree, and says so
(:attr:`Prestarted.was_written`).

This module imports neither anyio nor asyncio (that is its point).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import time

from ..errors import SpawnError
from . import supervisor
from .containment import Launch, prepare
from .spec import ProcessSpec

__all__ = ["Prestarted", "Standby", "prestart", "standby"]

_DISCARD_SECONDS = supervisor.KILL_SECONDS + 2.0  # the supervisor's own bound, and a margin


class Prestarted:
    """A supervised agent process spawned for :attr:`spec`, its pipes unread, and its input unwritten
    but for :attr:`written`.  (A plain class, not a dataclass: this module is imported before the
    spawn, and dataclasses imports inspect.)"""

    __slots__ = ("_tried", "discarded", "launch", "opening", "popen", "spec", "started", "taken", "written")

    def __init__(
        self, spec: ProcessSpec, popen: subprocess.Popen[bytes], launch: Launch, started: float
    ) -> None:
        self.spec = spec
        self.popen = popen
        self.launch = launch
        self.started = started  # wall clock, seconds since the epoch
        self.taken = False
        self.written: list[tuple[bytes, float]] = []
        """What :meth:`write` sent to the agent's stdin, each write with its time (wall clock)."""
        self.opening: object = None
        """What the protocol layer wrote :attr:`written` for (opaque here: bytes only)."""
        self.discarded = False
        """Ended by :meth:`discard` (never adopted)."""
        self._tried = False

    @property
    def was_written(self) -> bool:
        """Whether the agent was sent anything (even in part) before it was adopted."""
        return bool(self.written) or self._tried

    def write(self, lines: tuple[bytes, ...], opening: object) -> bool:
        """Send ``lines`` to the agent now, each whole, without blocking: True when all went in.
        Only into an empty pipe with room for all of them, so nothing waits; False (and nothing
        sent) otherwise.  A write that fails part way (the pipe closed: the agent died) leaves
        :attr:`was_written` set: the start must then be discarded."""
        stdin = self.popen.stdin
        if self.taken or self.written or stdin is None:
            return False
        fd = stdin.fileno()
        try:
            room = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) // 2  # half: the bytes fill whole pages
        except OSError:
            return False
        if sum(len(line) for line in lines) > room:
            return False
        self._tried = True
        os.set_blocking(fd, False)
        try:
            for line in lines:
                ts = time.time()
                if os.write(fd, line) != len(line):
                    return False
                self.written.append((line, ts))
        except OSError:
            return False
        finally:
            os.set_blocking(fd, True)
        self.opening = opening
        return True

    def take(self) -> Prestarted:
        """Hand it to the one that adopts it (only once)."""
        if self.taken:
            raise RuntimeError("this early start was adopted already")
        self.taken = True
        return self

    def discard(self) -> None:
        """End it: the agent was started for a run that did not come (refused, or changed).  Its
        supervisor kills the whole tree when its control socket closes; it is reaped here (bounded),
        and killed from here if it does not end."""
        if self.taken:
            return
        self.taken = self.discarded = True
        if self.was_written and self.launch.cgroup is not None:
            supervisor.cgroup_kill(self.launch.cgroup)  # it has its prompt: at once, from here too
        _end(self.popen, self.launch)


class Standby:
    """A supervisor spawned before its agent's spec is known, its pipes (the agent's to be), its
    control socket, idle until :meth:`start` or :meth:`discard` (one of them, once)."""

    __slots__ = ("_spawned", "done", "launch", "popen", "prestarted", "started")

    def __init__(self, popen: subprocess.Popen[bytes], launch: Launch, started: float) -> None:
        self.popen = popen
        self.launch = launch
        self.started = started  # wall clock, seconds since the epoch
        self._spawned = time.monotonic()
        self.done = False
        self.prestarted: Prestarted | None = None
        """What :meth:`start` made of it, for :meth:`discard` to end until a run adopts it."""

    def start(self, spec: ProcessSpec) -> Prestarted | None:
        """Have the supervisor start ``spec`` (its answer is awaited by the run that adopts it);
        None, and the supervisor ended, when it cannot be told (the run then starts its own)."""
        if self.done:
            raise RuntimeError("this supervisor was given its agent already")
        if time.monotonic() - self._spawned > supervisor.MESSAGE_SECONDS / 2:
            # Near its deadline it may stop waiting before it reads this: start no race with it.
            self.discard()
            return None
        try:
            self.launch.address(spec.argv, str(spec.cwd), spec.env)
        except SpawnError:
            self.discard()
            return None
        self.done = True
        if not self.launch.send():
            _end(self.popen, self.launch)
            return None
        self.prestarted = Prestarted(spec, self.popen, self.launch, self.started)
        return self.prestarted

    def discard(self) -> None:
        """End it, reaped here.  Unused, it sees its socket close and exits having started nothing;
        told what to start (or interrupted while being told: Ctrl-C in :meth:`start`), its agent is
        ended with it, as :meth:`Prestarted.discard` does (nothing once a run has adopted it)."""
        self.done = True
        if self.prestarted is not None:
            self.prestarted.discard()
        elif self.popen.returncode is None:
            _end(self.popen, self.launch)


def _end(popen: subprocess.Popen[bytes], launch: Launch) -> None:
    """Close our end of the control socket (the supervisor kills its tree, or exits having started
    nothing), reap the supervisor (bounded), and kill what a killed supervisor left."""
    launch.abandon()
    for stream in (popen.stdin, popen.stdout, popen.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        popen.wait(_DISCARD_SECONDS)
    except subprocess.TimeoutExpired:  # stopped by the agent (SIGSTOP), or stuck: the hard way
        popen.kill()  # the agent has PR_SET_PDEATHSIG: it dies with its supervisor
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(_DISCARD_SECONDS)
    cgroup = launch.cgroup
    if cgroup is not None:  # what a killed supervisor could not do
        supervisor.cgroup_kill(cgroup)
        supervisor.cgroup_remove(cgroup, 1.0)


def standby() -> Standby | None:
    """Spawn a supervisor now, for an agent to be named later (:meth:`Standby.start`): with the
    agent's pipes, in a new session, its control socket passed, here and with our environment
    (the agent's directory and environment go in the message); None where there is no supervisor
    on this machine, or it could not be spawned."""
    try:
        launch = prepare(None)
    except SpawnError:  # no supervisor here: the run starts the agent itself
        return None
    started = time.time()
    try:
        # As open_contained does: pipes, a new session, the control socket passed.
        popen = subprocess.Popen(
            launch.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=launch.pass_fds,
        )
    except OSError:
        launch.abandon()
        return None
    launch.spawned()
    return Standby(popen, launch, started)


def prestart(spec: ProcessSpec) -> Prestarted | None:
    """Spawn ``spec`` under a supervisor, now; None where that is not possible here (no supervisor
    on this machine, or the spawn failed: the run then starts the agent itself, and reports why it
    could not)."""
    waiting = standby()
    return None if waiting is None else waiting.start(spec)
