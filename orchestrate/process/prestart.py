"""An agent started before any event loop exists, contained as any other, adopted by a run later.

``orchestrate run`` spends a few hundred milliseconds importing (click, pydantic, anyio and
asyncio, the run and its approvals) before it could spawn the agent, and the agent's own start-up
(a Node CLI: about as long again) only began after that.  The CLI's early start (cli/early.py)
spawns the agent's supervisor with :func:`prestart` first thing instead, and the run takes the
process over with :meth:`AgentProcess.adopt <orchestrate.process.pipes.AgentProcess.adopt>` once
everything is loaded and checked, so the two start-ups overlap.

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

from . import supervisor
from .containment import Launch, prepare
from .spec import ProcessSpec

__all__ = ["Prestarted", "prestart"]

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
        self.launch.abandon()  # our end of the control socket closes: the supervisor kills the tree
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            self.popen.wait(_DISCARD_SECONDS)
        except subprocess.TimeoutExpired:  # stopped by the agent (SIGSTOP), or stuck: the hard way
            self.popen.kill()  # the agent has PR_SET_PDEATHSIG: it dies with its supervisor
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(_DISCARD_SECONDS)
        cgroup = self.launch.cgroup
        if cgroup is not None:  # what a killed supervisor could not do
            supervisor.cgroup_kill(cgroup)
            supervisor.cgroup_remove(cgroup, 1.0)


def prestart(spec: ProcessSpec) -> Prestarted | None:
    """Spawn ``spec`` under a supervisor, now; None where that is not possible here (no supervisor
    on this machine, or the spawn failed: the run then starts the agent itself, and reports why it
    could not)."""
    launch = prepare(spec.argv)
    if not launch.supervised:  # a process group alone: the run starts it the ordinary way
        launch.abandon()
        return None
    started = time.time()
    try:
        # As open_contained does: pipes, a new session, the control socket passed.
        popen = subprocess.Popen(
            launch.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=spec.directory,  # (a str: spec.cwd, a Path, would import pathlib before the spawn)
            env=spec.env,
            start_new_session=True,
            pass_fds=launch.pass_fds,
        )
    except OSError:
        launch.abandon()
        return None
    launch.spawned()
    return Prestarted(spec, popen, launch, started)
