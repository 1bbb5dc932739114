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
kills the tree.  Nothing is written to the agent here: its input is the run's, written only after
adoption, so an agent whose run is refused never receives a prompt.  What it prints meanwhile waits
in the pipe for the run, which records it in the raw log from the first byte.

This module imports neither anyio nor asyncio (that is its point).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass

from . import supervisor
from .containment import Launch, prepare
from .spec import ProcessSpec

__all__ = ["Prestarted", "prestart"]

_DISCARD_SECONDS = supervisor.KILL_SECONDS + 2.0  # the supervisor's own bound, and a margin


@dataclass(eq=False)
class Prestarted:
    """A supervised agent process spawned for :attr:`spec`, its pipes unread and its input unwritten."""

    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    launch: Launch
    started: float  # wall clock, seconds since the epoch
    taken: bool = False

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
        self.taken = True
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
            cwd=spec.cwd,
            env=spec.env,
            start_new_session=True,
            pass_fds=launch.pass_fds,
        )
    except OSError:
        launch.abandon()
        return None
    launch.spawned()
    return Prestarted(spec, popen, launch, started)
