# ruff: noqa: SIM105
# (contextlib.suppress: contextlib is not loaded before the early spawn, see the imports)
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

import os
import sys
import time

from ..errors import SpawnError
from . import supervisor
from .containment import Launch, prepare

# Neither typing nor contextlib at run time (with re, enum, collections, functools: ~10 ms before
# the early spawn); mypy takes any TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from typing import IO

    from .spec import ProcessSpec
else:
    import _signal as signal  # the C module: signal.py imports enum

__all__ = ["Prestarted", "Spawned", "Standby", "prestart", "standby", "vouch"]

_DISCARD_SECONDS = supervisor.KILL_SECONDS + 2.0  # the supervisor's own bound, and a margin


class Prestarted:
    """A supervised agent process spawned for :attr:`spec`, its pipes unread, and its input unwritten
    but for :attr:`written`.  (A plain class, not a dataclass: this module is imported before the
    spawn, and dataclasses imports inspect.)"""

    __slots__ = ("_tried", "discarded", "launch", "opening", "popen", "spec", "started", "taken", "written")

    def __init__(self, spec: ProcessSpec, popen: Spawned, launch: Launch, started: float) -> None:
        self.spec = spec
        self.popen = popen
        self.launch = launch
        self.started = started  # wall clock, seconds since the epoch
        self.taken = False
        self.written: list[tuple[bytes, float]] = []
        """What :meth:`write` sent to the agent's stdin, each write with its time (wall clock)."""
        self.opening: object = None
        """What the protocol layer wrote (or began to write) :attr:`written` for (opaque here:
        bytes only)."""
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
        import fcntl  # only here: the early write alone uses it

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
        self.opening = opening  # (before the first byte: a write cut short still says what it was)
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

    __slots__ = ("_seconds", "_spawned", "done", "launch", "popen", "prestarted", "started")

    def __init__(
        self, popen: Spawned, launch: Launch, started: float, seconds: float = supervisor.MESSAGE_SECONDS
    ) -> None:
        self.popen = popen
        self.launch = launch
        self.started = started  # wall clock, seconds since the epoch
        self._seconds = seconds  # how long the supervisor waits for its message
        self._spawned = time.monotonic()
        self.done = False
        self.prestarted: Prestarted | None = None
        """What :meth:`start` made of it, for :meth:`discard` to end until a run adopts it."""

    def start(self, spec: ProcessSpec) -> Prestarted | None:
        """Have the supervisor start ``spec`` (its answer is awaited by the run that adopts it);
        None, and the supervisor ended, when it cannot be told (the run then starts its own)."""
        if self.done:
            raise RuntimeError("this supervisor was given its agent already")
        if time.monotonic() - self._spawned > self._seconds / 2:
            # Near its deadline it may stop waiting before it reads this: start no race with it.
            self.discard()
            return None
        try:
            # (spec.directory, a str: spec.cwd, a Path, would import pathlib before the send)
            self.launch.address(spec.argv, spec.directory, spec.env)
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


def _end(popen: Spawned, launch: Launch) -> None:
    """Close our end of the control socket (the supervisor kills its tree, or exits having started
    nothing), reap the supervisor (bounded), and kill what a killed supervisor left."""
    launch.abandon()
    for stream in (popen.stdin, popen.stdout, popen.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
    if popen.wait(_DISCARD_SECONDS) is None:  # stopped by the agent (SIGSTOP), or stuck: the hard way
        popen.kill()  # the agent has PR_SET_PDEATHSIG: it dies with its supervisor
        popen.wait(_DISCARD_SECONDS)
    cgroup = launch.cgroup
    if cgroup is not None:  # what a killed supervisor could not do
        supervisor.cgroup_kill(cgroup)
        supervisor.cgroup_remove(cgroup, 1.0)


class Spawned:
    """The supervisor's process as the run reads it (what it uses of ``subprocess.Popen``): forked,
    or spawned with ``os.posix_spawn`` (:func:`standby`), so that the early start need not import
    subprocess (with threading, selectors and signal's enums: ~6 ms) before it.  Reaped only here
    (:meth:`poll`), so until then its pid cannot be another process's."""

    __slots__ = ("args", "forked", "pid", "returncode", "stderr", "stdin", "stdout")

    def __init__(
        self,
        args: list[str],
        pid: int,
        stdin: IO[bytes],
        stdout: IO[bytes],
        stderr: IO[bytes],
        forked: bool = False,
    ) -> None:
        self.args = args
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.forked = forked
        """A fork of ours running the supervisor's code (else a ``python -I -S`` of its own)."""
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (SIGCHLD ignored): as Popen says
                self.returncode = 0
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int | None:
        """Its exit code once it has exited, within ``timeout`` seconds; None if it has not."""
        deadline = time.monotonic() + timeout
        pause = 0.0005
        while self.poll() is None:
            if time.monotonic() > deadline:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped: the pid is still our supervisor's
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def standby(fork: bool = True, seconds: float = supervisor.MESSAGE_SECONDS) -> Standby | None:
    """Start a supervisor now, for an agent to be named later (:meth:`Standby.start`): with the
    agent's pipes, in a new session, its control socket passed, here and with our environment
    (the agent's directory and environment go in the message), waiting ``seconds`` at most for its
    message; None where there is no supervisor on this machine, or it could not be started.

    Forked (:func:`_fork`) where that is safe (``fork``, and we are one thread: the early start,
    before anything has started one) and quiet (no ``-X importtime`` nor ``-v``): the supervisor's
    code is loaded already, so it is ready in about a millisecond, where a ``python -I -S`` of its
    own takes ~13 ms to start, before the agent could.  Else spawned with ``os.posix_spawn``,
    which passes on every fd of ours that is inheritable, not only its pipes and the socket (Popen
    closes the others in the child).  Either way the supervisor closes every other fd first thing,
    so neither it nor the agent keeps any (tests/test_supervisor_first.py,
    tests/test_supervisor_fork.py)."""
    try:
        launch = prepare(None)
    except SpawnError:  # no supervisor here: the run starts the agent itself
        return None
    ends: list[int] = []
    args = [*launch.argv, repr(seconds)]
    try:
        for _ in range(3):
            ends += os.pipe()  # close-on-exec: only their copies as 0, 1 and 2 reach the child
        (theirs,) = launch.pass_fds
        if min(*ends, theirs) <= 2:
            # Our 0, 1 or 2 was closed, so a new fd took its number: the dup2s below would
            # overwrite one of ours in the child.  Rare; the run's own spawn (Popen) sorts it out.
            raise OSError("a standard fd of ours is closed")
        started = time.time()
        forked = fork and not _reports_imports() and _alone()
        if forked:
            pid = _fork(theirs, (ends[0], ends[3], ends[5]), seconds, launch.cgroup)
        else:
            os.set_inheritable(theirs, True)  # nothing else runs here now: no other spawn takes it
            pid = os.posix_spawn(
                args[0],
                args,
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, ends[0], 0),
                    (os.POSIX_SPAWN_DUP2, ends[3], 1),
                    (os.POSIX_SPAWN_DUP2, ends[5], 2),
                ],
                setsid=True,  # a new session: the terminal's Ctrl-C reaches us, not the agent
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),  # as Popen restores them
            )
    except (OSError, NotImplementedError):  # NotImplementedError: no POSIX_SPAWN_SETSID here
        for fd in ends:
            os.close(fd)
        launch.abandon()
        return None
    launch.spawned()
    for fd in (ends[0], ends[3], ends[5]):
        os.close(fd)
    # Our ends as Popen makes them: buffered files.
    stdin, stdout, stderr = os.fdopen(ends[1], "wb"), os.fdopen(ends[2], "rb"), os.fdopen(ends[4], "rb")
    return Standby(Spawned(args, pid, stdin, stdout, stderr, forked), launch, started, seconds)


def _reports_imports() -> bool:
    """Whether this interpreter reports its imports on stderr (``-X importtime``, ``-v``, or their
    environment variables): a fork of it would report the supervisor's own later imports (_ctypes)
    on the stderr it hands the agent, as the agent's (tests/test_supervisor_fork_imports.py).  A
    spawned ``python -I -S`` has flags of its own, and ignores the environment."""
    flags = sys.flags
    if flags.verbose or getattr(flags, "import_time", 0) or "importtime" in sys._xoptions:
        return True
    return not flags.ignore_environment and bool(os.environ.get("PYTHONPROFILEIMPORTTIME"))


def _alone() -> bool:
    """Whether this process has one thread (ours) and no module but the standard library's and ours:
    only then is a fork that goes on running Python safe.  Another thread's lock held at the fork (a
    buffer's, say) stays held in the child; and ``os.fork`` runs every hook registered with
    ``os.register_at_fork``, in the supervisor and, through its own fork, in the agent before its
    exec, where a site's instrumentation (a sitecustomize, a .pth: ddtrace, OpenTelemetry) may have
    registered one that writes, opens or starts something (a spawned ``python -I -S`` runs none)."""
    try:
        if len(os.listdir("/proc/self/task")) != 1:  # noqa: PTH208 - no pathlib before the spawn
            return False
    except OSError:
        return False
    try:
        return not _foreign_modules()
    except Exception:  # a module that will not say its file (a lazy one that fails to load): foreign
        return False


_STDLIB = os.path.dirname(os.__file__) + os.sep  # noqa: PTH120
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # noqa: PTH100, PTH120
_SITE_DIRS = ("site-packages", "dist-packages")  # under the standard library's directory, not of it
# Loaded by the .pth files of virtual environments themselves; they register no fork hook.
_INERT = ("_distutils_hack", "_virtualenv", "__editable__")
_vouched: set[str] = set()  # modules :func:`vouch` named: not foreign


def vouch(names: set[str]) -> None:
    """Count the modules ``names`` as ours: ``orchestrate warm`` (cli/warm_server.py) names those it
    loaded itself, our dependencies (pydantic, anyio, click...), none of which registers a fork
    hook, so its runs fork their supervisors as a cold run does, rather than spawn a new
    interpreter for them (~20-40 ms before the agent could start).  What a site loaded before the
    server's own imports (a sitecustomize's instrumentation) stays foreign."""
    _vouched.update(names)


def _foreign_modules() -> list[str]:
    """The modules loaded here that are neither the standard library's nor ours (any of them may
    have registered a fork hook)."""
    found = []
    for name, module in list(sys.modules.items()):
        if name in _vouched:  # (first: a warm server's run has ~600 of them, ~8 ms to look at)
            continue
        file = getattr(module, "__file__", None)
        if type(file) is not str:  # (not a path as an import sets it: judged foreign)
            file = None if file is None else "?"
        if not file or name.startswith(_INERT) or file.startswith(_OURS):
            continue  # (no file: built in, frozen, or a namespace package, whose modules have one)
        if name == "__main__" and _installers_script(module):
            continue
        if file.startswith(_STDLIB) and not file[len(_STDLIB) :].startswith(_SITE_DIRS):
            continue
        found.append(name)
    return found


_EARLY_MAIN = __name__.rpartition(".process.")[0] + ".cli.early"  # (cli/early.py: its main)


def _installers_script(module: object) -> bool:
    """Whether ``__main__`` is the ``orchestrate`` command as an installer writes it (pip, uv: a few
    lines that import our main and call it): then it has no global but modules (each judged in
    sys.modules on its own) and our main.  Counted as a module of the site, it made the command
    people type spawn its supervisor every time (tests/test_supervisor_fork_entry.py)."""
    found = False
    for key, value in vars(module).items():
        if key.startswith("__") or type(value) is type(sys):
            continue
        if key != "main" or getattr(value, "__module__", None) != _EARLY_MAIN:
            return False  # code of its own: it may have done anything (registered a fork hook)
        found = True
    return found and _installers_code(getattr(module, "__file__", ""))


# Every name an installer's script uses (pip's, uv's, distlib's and installer's templates): a
# script that uses no other, and defines no function, cannot have registered a fork hook (that
# takes os, register_at_fork, getattr or __import__), whatever its globals were left as.
_SCRIPT_NAMES = frozenset(
    {"re", "sys", "main", "__name__", "argv", "sub", "endswith", "removesuffix", "exit"}
)


def _installers_code(file: str) -> bool:
    """Whether the script ``file`` uses no name but an installer's and our main's module, and has
    no code object in it (a def, a lambda): what its globals cannot tell, as a hook registered
    through a lambda, or by a function deleted after (tests/test_supervisor_fork_entry.py)."""
    try:
        with open(file, "rb") as script:  # noqa: PTH123 - no pathlib before the spawn (~0.1 ms)
            code = compile(script.read(), file, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return False
    if any(type(const) is type(code) for const in code.co_consts):
        return False
    return set(code.co_names) <= _SCRIPT_NAMES | {_EARLY_MAIN}


def _fork(ctl: int, std: tuple[int, int, int], seconds: float, cgroup: str | None) -> int:
    """Fork the supervisor: the child does what the spawn's attributes did (a new session, ``std``
    as its 0, 1 and 2) and runs the supervisor's main, which closes every other fd first; it never
    returns into our code (no atexit handler, no buffer of ours flushed twice): it ends by
    ``os._exit``.  Our signals are blocked across the fork, so one sent to the child before the
    supervisor's handlers are in place waits for them (and is forwarded to the agent), rather than
    running a handler of ours there; SIGPIPE and SIGXFSZ are ignored there, as the interpreter of a
    spawned supervisor sets them (its agent gets them back at their defaults)."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        return pid
    try:
        import gc

        # Our garbage is not collected there: a cycle of ours holding a file would close its fd
        # number, which the supervisor may have reused by then.
        gc.freeze()
        os.setsid()
        for fd, number in zip(std, (0, 1, 2), strict=True):
            os.dup2(fd, number)
        # The cgroup is known here: the agent's process is forked into it at once (supervisor.py)
        supervisor.main([str(ctl), repr(seconds)], early=True, cgroup=cgroup)  # ends by os._exit
    except BaseException as exc:  # never into our code (SystemExit included)
        try:
            os.write(2, f"orchestrate: the supervisor failed: {exc!r}\n".encode(errors="replace"))
        except BaseException:
            pass
    os._exit(1)


def prestart(spec: ProcessSpec, fork: bool = True) -> Prestarted | None:
    """Spawn ``spec`` under a supervisor (forked where :func:`standby` may), now; None where that is
    not possible here (no supervisor on this machine, or the spawn failed: the run then starts the
    agent itself, and reports why it could not)."""
    waiting = standby(fork)
    return None if waiting is None else waiting.start(spec)
