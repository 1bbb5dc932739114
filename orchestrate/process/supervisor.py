# ruff: noqa: PTH106, PTH112, PTH118, PTH120, PTH123, PTH208, SIM105
# (pathlib and contextlib would double the start-up time of this process)
"""The supervisor: a small process between orchestrate and an agent, so that no process outlives its run.

Run as ``python -I -S -c BOOT SUPERVISOR_PY CTL_FD`` (:func:`command`: the module imported from its
directory, appended to ``sys.path``, so that its cached bytecode is used and this file is not
compiled again at every start), or as ``python -I -S supervisor.py CTL_FD``, or forked by the early
start (process/prestart.py: :func:`main` called in a one-thread fork of orchestrate, which knows the
cgroup already, so the agent's process is made in it before the message comes; once it has started
the agent it renames itself, so that ps lists no second ``orchestrate run``: :func:`_rename`).  It is
a standalone file: it imports nothing of orchestrate and little of the standard library (no
``signal``, whose enums cost more than the rest), so it starts in about 10 ms.  What to start comes
over the control socket CTL_FD, never on the command line (``/proc/PID/cmdline`` is world-readable,
and the supervisor can be spawned before the agent's command line is known: cli/early.py): one
message, :func:`encode`'s, read under a deadline (:data:`MESSAGE_SECONDS`) with a cap on its size
(:data:`MAX_MESSAGE`).  End of file, a wrong magic, an oversized length, a short body, a body that
does not parse, or any byte past the body: it exits 125, having started nothing.  Then it

- makes itself a child subreaper, so every orphan of the agent's tree (a daemon that double-forked, a
  grandchild that called ``setsid``) is re-parented to it and stays findable;
- changes to the agent's working directory and forks the agent with its own stdin, stdout and
  stderr (pipes and terminals go straight to the agent), in a process group of its own (the
  terminal's foreground group when stdin is a terminal), with ``PR_SET_PDEATHSIG`` so that the
  agent dies when the supervisor does, in the message's cgroup (a directory; none if empty: born
  there by ``clone3``, else joined first thing), with the message's environment (``execvpe``: the
  program is looked up in that environment's PATH);
- answers on the control socket ``ok PID IN_CGROUP`` once the agent runs, or ``err ERRNO`` (``err
  ERRNO cwd`` when the working directory could not be entered);
- obeys lines on the control socket: ``signal N`` (the agent), ``group N`` (the agent's process
  group), ``kill`` (everything).  End of file (orchestrate closed it, or died, even by SIGKILL) is
  ``kill``;
- forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 it receives to the agent;
- once the agent has exited, or on ``kill``: kills every descendant (``cgroup.kill``, then the process
  tree under it, each signalled through a pidfd), reaps them, removes the cgroup (and a few empty
  ones left over by dead runs: :func:`cgroup_sweep`), and exits with the agent's status (its exit
  code, or the same signal raised again), so the caller sees the agent's.

The cgroup helpers at the end are also imported by orchestrate (``containment.py``) to clean up after
a supervisor that did not.
"""

from __future__ import annotations

import os
import select
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
else:
    import _signal  # the C module: ``signal`` would import enum, a third of our start-up time

__all__ = [
    "MAX_MESSAGE",
    "MESSAGE_SECONDS",
    "NOTHING_STARTED",
    "cgroup_kill",
    "cgroup_remove",
    "cgroup_sweep",
    "command",
    "decode",
    "die_with_parent",
    "encode",
]

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
FORWARDED = (
    _signal.SIGINT,
    _signal.SIGTERM,
    _signal.SIGHUP,
    _signal.SIGQUIT,
    _signal.SIGUSR1,
    _signal.SIGUSR2,
)
KILL_SECONDS = 3.0  # to kill and reap the whole tree; orchestrate waits 5 s after its last rung

# The message: MAGIC, the body's length (4 bytes, big-endian), the body: NUL-separated fields (no
# field of an exec can hold a NUL): the cgroup ("" none), the working directory ("" stay), the
# number of arguments, the number of environment entries ("-": keep ours), the arguments, the
# entries (KEY=VALUE).
MAGIC = b"orchsup1"
_HEADER = len(MAGIC) + 4
MAX_MESSAGE = 16 << 20  # more than any exec takes (the kernel's own limit is about 2 MiB by default)
MESSAGE_SECONDS = 30.0  # from our start; the early start sends it within milliseconds
NOTHING_STARTED = 125  # our exit code when no valid message came: nothing was started
# How orchestrate starts us: our directory is appended to the path (not prepended: orchestrate/process
# has a pty.py), so `import supervisor` reads this module's cached bytecode when there is one.
BOOT = (
    "import sys;sys.path.append(sys.argv[1].rpartition('/')[0]);import supervisor;"
    "supervisor.main(sys.argv[2:])"
)


class _State:
    agent: int | None = None
    status: int | None = None  # the agent's wait status, once reaped
    pending: list[int] = []  # signals that came before the agent existed


def _prctl(option: int, arg: int) -> None:
    # The C module alone, not the ``ctypes`` package, whose classes cost this process's start
    # about 5 ms more (40 % of it) for the one call it makes: only the supervisor needs it, not an
    # importer of this module.
    import _ctypes

    class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]  # ctypes.c_int
        _type_ = "i"

    class _Function(_ctypes.CFuncPtr):  # a function of CDLL(None, use_errno=True): C int result
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = _Int

    class _Libc:  # what CFuncPtr reads of a CDLL: its handle (None: the process's own symbols)
        _handle = _ctypes.dlopen(None)  # type: ignore[arg-type]  # dlopen(NULL), as CDLL(None)

    prctl = _Function(("prctl", _Libc))  # type: ignore[arg-type]  # duck-typed: a CDLL-like
    if prctl(option, arg, 0, 0, 0) != 0:
        errno = _ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def die_with_parent(sig: int = _signal.SIGKILL) -> None:
    """``PR_SET_PDEATHSIG``: this process gets ``sig`` when its parent thread ends (a warm server's
    runs die with it: cli/warm_server.py)."""
    _prctl(PR_SET_PDEATHSIG, sig)


CLONE_INTO_CGROUP = 0x200000000
SYS_CLONE3 = 435  # the same number on every architecture (the generic table's, Linux 5.3)


def _clone_into(cgroup: str) -> int:
    """``fork()``, the child born in the cgroup ``cgroup`` (``clone3`` with ``CLONE_INTO_CGROUP``,
    Linux 5.7): no migration, which waits for an RCU grace period (~10-16 ms) when no process has
    changed cgroups on the machine for a while.  0 in the child, as fork; OSError where it is refused
    (an older kernel, a seccomp filter).  The child must not use threads nor rely on its libc's idea
    of its thread id (not reset: this is no glibc fork); ours runs a few system calls, then execs."""
    import _ctypes

    class _Long(_ctypes._SimpleCData):  # type: ignore[type-arg]  # ctypes.c_long
        _type_ = "l"

    class _Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = _Long

    class _Libc:
        _handle = _ctypes.dlopen(None)  # type: ignore[arg-type]

    syscall = _Function(("syscall", _Libc))  # type: ignore[arg-type]
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        # struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size,
        # tls, set_tid, set_tid_size, cgroup (u64 each).
        fields = (CLONE_INTO_CGROUP, 0, 0, 0, int(_signal.SIGCHLD), 0, 0, 0, 0, 0, fd)
        args = b"".join(field.to_bytes(8, sys.byteorder) for field in fields)
        pid: int = syscall(_Long(SYS_CLONE3), args, _Long(len(args)))
        if pid < 0:
            errno = _ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))
        return pid
    finally:
        os.close(fd)


# --- the agent -------------------------------------------------------------------------------


class _Stem:
    """The agent's process before its exec: forked and born in the cgroup first, then told what to
    exec (the message's body, its length first, over a pipe of its own: :func:`_read_orders`
    refuses a part of it), or told nothing (end of file: it exits).

    Forked as soon as the cgroup is known (the early start's fork knows it before the message
    comes: :func:`main`'s ``cgroup``), so that its join, which costs an RCU grace period (~16 ms)
    when no cgroup has been joined on the machine for a while, overlaps the message's way here
    instead of coming after it."""

    def __init__(self, cgroup: str | None, report: int, early: bool) -> None:
        self.cgroup = cgroup
        orders, self._orders = os.pipe()
        parent = os.getpid()
        joined = cgroup is not None
        try:
            self.pid = _clone_into(cgroup) if cgroup is not None else os.fork()
        except OSError:
            joined = False
            self.pid = os.fork()  # then it joins the cgroup itself (_become_agent)
        if self.pid:
            os.close(orders)
            return
        try:  # the child: never returns into the supervisor's code
            os.close(self._orders)
            _become_agent(None if joined else cgroup, parent, report)
            body = _read_orders(orders)
            if body == b"":  # told nothing (end of file at once): start nothing
                os._exit(0)
            message = None if body is None else decode(body)
            if message is None:  # cut short, or more than the orders: never run a part of them
                import errno  # (built in: this path alone)

                os.write(report, b"e%d" % errno.EBADMSG)
                os._exit(NOTHING_STARTED)
            argv, cwd, env, _ = message
            if cwd and early:  # forked before the supervisor entered it (then we inherit it)
                os.chdir(cwd)
            if env is None:
                os.execvp(argv[0], argv)
            os.execvpe(argv[0], argv, env)  # PATH looked up in env, as execvp did under it
        except OSError as exc:
            os.write(report, b"e%d" % (exc.errno or 0))
        except BaseException:  # anything at all: never return into the supervisor's code
            os.write(report, b"e0")
        os._exit(127)

    def go(self, body: bytes) -> None:
        """Have it exec what ``body`` (a message's) says: its length first (:func:`_read_orders`)."""
        try:
            for data in (len(body).to_bytes(_ORDERS_HEADER, "big"), body):
                view = memoryview(data)
                while view:
                    view = view[os.write(self._orders, view) :]
        except OSError:  # it died (a signal): its exit says so
            pass
        os.close(self._orders)

    def end(self) -> None:
        """Kill it unstarted and reap it, then remove its cgroup (nobody else may: orchestrate may be
        gone, and this is what it would have abandoned)."""
        os.close(self._orders)
        try:
            os.kill(self.pid, _signal.SIGKILL)  # not reaped: the number is still its own
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        if self.cgroup is not None:
            cgroup_remove(self.cgroup, 1.0)


# The orders' length, before them: a body larger than the pipe goes in several writes, and a
# supervisor killed between two (SIGKILL) leaves a part of it and end of file.  PR_SET_PDEATHSIG
# kills the stem then, but only soon after: a part must not parse as orders meanwhile (a cut in
# the last argument or environment entry still does), so the stem checks the length itself.
_ORDERS_HEADER = 4


def _read_orders(fd: int) -> bytes | None:
    """The orders on ``fd`` up to end of file: b"" for none at all, None unless they are exactly the
    body the length before them announces (cut short, a byte more, or over MAX_MESSAGE)."""
    chunks = []
    got = 0
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
        got += len(chunk)
        if got > _ORDERS_HEADER + MAX_MESSAGE:
            return None
    if not got:
        return b""
    data = b"".join(chunks)
    if got < _ORDERS_HEADER or int.from_bytes(data[:_ORDERS_HEADER], "big") != got - _ORDERS_HEADER:
        return None
    return data[_ORDERS_HEADER:]


def _become_agent(cgroup: str | None, parent: int, report: int) -> None:
    # Born in the cgroup, before it can fork: nothing it starts is ever outside.
    if cgroup is not None:
        try:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:
                procs.write("0")
        except OSError:
            os.write(report, b"c")  # the supervisor alone still holds the tree
    _prctl(PR_SET_PDEATHSIG, _signal.SIGKILL)
    if os.getppid() != parent:  # the supervisor died before the line above
        os._exit(137)
    os.setpgid(0, 0)
    if os.isatty(0):
        # The agent's group gets the terminal's signals (Ctrl-C typed in it, SIGWINCH), not us.
        _signal.signal(_signal.SIGTTOU, _signal.SIG_IGN)
        try:
            os.tcsetpgrp(0, os.getpid())
        except OSError:
            pass
    for sig, disposition in _ORIGINAL.items():
        _signal.signal(sig, disposition)
    for sig in (_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGTTOU):
        _signal.signal(sig, _signal.SIG_DFL)  # as subprocess does: Python ignores these for itself


_ORIGINAL: dict[int, int] = {}  # how the signals we catch were set when we started: SIG_IGN stays


def _catch(sig: int, handler: _signal._HANDLER) -> None:
    before = _signal.getsignal(sig)
    _ORIGINAL[sig] = _signal.SIG_IGN if before == _signal.SIG_IGN else _signal.SIG_DFL
    _signal.signal(sig, handler)


def _forward(sig: int, frame: object) -> None:
    if _State.agent is None:
        if sig not in _State.pending:  # each once: a flood while we wait for the message is bounded
            _State.pending.append(sig)
    elif _State.status is None:  # not reaped yet, so the pid is still the agent's
        try:
            os.kill(_State.agent, sig)
        except OSError:
            pass


def _wake(sig: int, frame: object) -> None:
    """SIGCHLD: the handler does nothing; the wakeup fd it makes Python write to wakes the loop."""


def _reap() -> bool:
    """Reap every child that has exited (the agent and re-parented orphans); False when none is left."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        if pid == _State.agent:
            _State.status = status


# --- the loop --------------------------------------------------------------------------------


def _serve(ctl: int, wakeup: int) -> None:
    """Until the agent exits, or orchestrate says kill or goes away."""
    poller = select.poll()
    poller.register(ctl, select.POLLIN)
    poller.register(wakeup, select.POLLIN)
    buffer = b""
    while True:
        _reap()
        if _State.status is not None:
            return
        for fd, _ in poller.poll():
            if fd == wakeup:
                _drain(wakeup)
                continue
            try:
                data = os.read(ctl, 4096)
            except OSError:
                data = b""
            if not data:
                return
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if _obey(line.split()):
                    return


def _obey(words: list[bytes]) -> bool:
    """One command from orchestrate; True for kill."""
    agent = _State.agent
    if not words:
        return False
    if words[0] == b"kill":
        return True
    # (_count: at most 9 digits, so int() and kill() take it: a longer number raised out of here)
    if agent is None or _State.status is not None or len(words) != 2 or not _count(words[1]):
        return False
    try:
        if words[0] == b"signal":
            os.kill(agent, int(words[1]))
        elif words[0] == b"group":
            # Safe from pid reuse: the agent is not reaped, so no new group can take its number.
            os.killpg(agent, int(words[1]))
    except OSError:
        pass
    return False


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


# --- the end: kill everything ----------------------------------------------------------------


def _proc_stat(pid: int | str) -> tuple[bytes, int] | None:
    """(state, parent pid) of a process, from /proc; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return fields[0], int(fields[1])


def _descendants(root: int) -> list[int]:
    """Live processes under ``root``, parents before children."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _proc_stat(name)
            if stat is not None and stat[0] != b"Z":  # a zombie needs no signal, only a reaper
                children.setdefault(stat[1], []).append(int(name))
    found: list[int] = []
    queue = [root]
    while queue:
        kids = children.get(queue.pop(), [])
        found += kids
        queue += kids
    return found


def _kill(pid: int, trusted: set[int]) -> None:
    """SIGKILL ``pid`` if it is still a child of a process known to be ours, through a pidfd: the
    pidfd pins the process, and its parent, read after, proves it is the one we saw, not a new
    process that reused the number."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # gone, or a kernel before 5.3: then the parent check alone
        fd = -1
    try:
        stat = _proc_stat(pid)
        if stat is None or stat[1] not in trusted:
            return
        trusted.add(pid)
        if fd >= 0:
            _signal.pidfd_send_signal(fd, _signal.SIGKILL)
        else:
            os.kill(pid, _signal.SIGKILL)
    except OSError:
        pass
    finally:
        if fd >= 0:
            os.close(fd)


def _kill_tree(deadline: float) -> None:
    """Kill and reap every descendant.  Orphans come to us (we are their subreaper), so the tree is
    empty when we have no child left at all; rounds repeat for what was forked during the last."""
    me = os.getpid()
    while True:
        trusted = {me}
        for pid in _descendants(me):
            _kill(pid, trusted)
        if not _reap() or time.monotonic() > deadline:
            return
        time.sleep(0.005)


def _finish(cgroup: str | None) -> None:
    deadline = time.monotonic() + KILL_SECONDS
    if cgroup is not None:
        cgroup_kill(cgroup)
    _kill_tree(deadline)
    if cgroup is not None:
        cgroup_remove(cgroup, max(deadline - time.monotonic(), 0.5))
        cgroup_sweep(os.path.dirname(cgroup))  # after the agent: on nobody's way to a start


def _exit_as(status: int | None) -> None:
    """Exit the way the agent did: same exit code, or killed by the same signal."""
    if status is None:  # never reaped (stuck in the kernel past the deadline): it was killed
        os._exit(128 + _signal.SIGKILL)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        import resource  # only on this path

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the agent's crash is no core of ours
        if sig != _signal.SIGKILL:
            _signal.signal(sig, _signal.SIG_DFL)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not end a process by default
    os._exit(os.waitstatus_to_exitcode(status))


def main(args: list[str], early: bool = False, cgroup: str | None = None) -> None:
    """``CTL_FD [MESSAGE_SECONDS]``.  ``early`` (the early start's fork, which knows it now): the
    message's cgroup is ``cgroup``, and the agent's process is forked into it at once (:class:`_Stem`);
    a message naming another starts nothing."""
    ctl = int(args[0])
    seconds = float(args[1]) if len(args) > 1 else MESSAGE_SECONDS
    _close_all_but(ctl)
    os.set_inheritable(ctl, False)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    _signal.set_wakeup_fd(wake_write)
    for sig in FORWARDED:
        _catch(sig, _forward)
    _catch(_signal.SIGCHLD, _wake)
    # Unblocked once caught: a fork of orchestrate (prestart.py) starts with every signal blocked,
    # so one sent before this line waits for our handlers (and reaches the agent).
    _signal.pthread_sigmask(_signal.SIG_SETMASK, [])
    report_read, report_write = os.pipe()
    stem = None
    if early:
        try:
            stem = _Stem(cgroup, report_write, early=True)
        except OSError:
            stem = None  # forked after the message, as for a spawned supervisor
    try:
        # Before the message: this (with its import of _ctypes) then overlaps the caller's work.
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    except OSError as exc:
        subreaper: OSError | None = exc
    else:
        subreaper = None
    body = _receive(ctl, seconds)
    message = None if body is None else decode(body)  # None too for a body that does not parse
    if body is None or message is None or (early and message[3] != cgroup):
        if stem is not None:
            stem.end()
        os._exit(NOTHING_STARTED)  # nothing started; a cgroup without a stem is the caller's own
    cwd, cgroup = message[1], message[3]
    if cwd:
        try:
            os.chdir(cwd)  # the agent's directory, ours too (as when it was the spawn's cwd)
        except OSError as exc:
            _say(ctl, b"err %d cwd\n" % (exc.errno or 0))
            if stem is not None:
                stem.end()
            os._exit(127)
    try:
        if subreaper is not None:
            raise subreaper
        if stem is None:
            stem = _Stem(cgroup, report_write, early=False)
    except OSError as exc:
        _say(ctl, b"err %d\n" % (exc.errno or 0))
        if stem is not None:
            stem.end()
        os._exit(127)
    stem.go(body)
    _State.agent = stem.pid
    if early:  # while the agent's process execs (it had its orders): on nobody's way
        _rename()
    os.close(report_write)
    if not _answer(ctl, report_read, cgroup is not None):
        _finish(cgroup)
        os._exit(127)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the agent alone holds its pipes: their end of file is its own
        os.dup2(null, fd)
    for pending in _State.pending:
        _forward(pending, None)
    _serve(ctl, wake_read)
    _finish(cgroup)
    _exit_as(_State.status)


# What ps and top list a supervisor forked by the early start as, instead of the ``orchestrate run
# ...`` it was forked from: its name (``/proc/PID/comm``: at most 15 bytes) and its command line.
NAME = b"orch-supervisor"
TITLE = b"orchestrate supervisor"


def _rename() -> None:
    """Name this process :data:`NAME`, its command line :data:`TITLE`: what can be done without a
    C extension (this is a fork of orchestrate: its ``argv`` is orchestrate's, and so was its name
    when orchestrate was started as a script).  Best effort, and quiet: a /proc that refuses either
    leaves it as it was.

    The command line the kernel shows is the memory its ``argv`` strings were in: written through
    ``/proc/self/mem`` (any process may write its own writable memory there), at ``arg_start`` of
    ``/proc/self/stat``.  Nothing of Python's reads them after start-up (``sys.argv`` and
    ``sys.orig_argv`` are copies).  The last byte of that memory is made non-zero, as
    setproctitle(3) does: the kernel then shows the strings up to the first NUL, the title alone,
    not the title and a run of empty arguments.

    A write there ignores the memory's protections, and ``/proc/self/stat`` may not say where our
    ``argv`` is (an emulated /proc, arguments moved by ``PR_SET_MM``): the range is written only if
    it is exactly as long as our original arguments and holds them now (``sys.orig_argv``), so
    nothing else is ever overwritten, and nothing is allocated for an absurd range
    (tests/test_supervisor_rename.py).  Never raises: the agent runs by now, and dies with us."""
    try:
        fd = os.open("/proc/self/comm", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, NAME)
        finally:
            os.close(fd)
    except OSError:
        pass
    try:
        fd = os.open("/proc/self/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            stat = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = stat[stat.rindex(b")") + 2 :].split()  # from the 3rd field (a name may hold ") ")
        start, end = int(fields[48 - 3]), int(fields[49 - 3])  # arg_start, arg_end (Linux 3.5)
        argv = b"".join(os.fsencode(arg) + b"\0" for arg in sys.orig_argv)
        if end - start != len(argv) or len(argv) < len(TITLE) + 2:  # (0 and 0 where not shown)
            return
        fd = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
        try:
            if os.pread(fd, len(argv), start) == argv:
                os.pwrite(fd, TITLE + bytes(len(argv) - len(TITLE) - 1) + b".", start)
        finally:
            os.close(fd)
    except Exception:  # (OSError, ValueError, IndexError, OverflowError...): it stays as it was
        pass


def _close_all_but(ctl: int) -> None:
    """Close every fd but 0, 1, 2 and ``ctl``: whatever the spawner left inheritable (the early
    start's ``posix_spawn`` closes nothing; Popen's ``close_fds`` did this in its child), so that
    the agent gets nothing of its caller's.  Nothing of ours is open yet."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: every number up to a bound
        fds = list(range(3, 1 << 16))
    for fd in fds:
        if fd > 2 and fd != ctl:
            try:
                os.close(fd)  # the one listdir read through is closed already: EBADF
            except OSError:
                pass


def _say(ctl: int, line: bytes) -> None:
    try:
        os.write(ctl, line)
    except OSError:
        pass


# --- the message ---------------------------------------------------------------------------------

_Message = tuple[list[bytes], bytes, dict[bytes, bytes] | None, str | None]


def _receive(ctl: int, seconds: float) -> bytes | None:
    """The body of the one message on ``ctl``, read within ``seconds`` of now and never past its
    end; None for anything else (end of file first, too slow, a bad magic or length, a byte more)."""
    deadline = time.monotonic() + seconds
    poller = select.poll()
    poller.register(ctl, select.POLLIN)
    chunks: list[bytes] = []
    got = 0
    need = _HEADER
    header = True  # (not ``need == _HEADER``: a body may be as long as a header)
    while got < need:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000 + 1):
            return None
        try:
            chunk = os.read(ctl, min(need - got, 1 << 16))  # never more than the message
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
        if header and got == _HEADER:
            data = b"".join(chunks)
            length = int.from_bytes(data[len(MAGIC) :], "big")
            if data[: len(MAGIC)] != MAGIC or length > MAX_MESSAGE:
                return None
            chunks, got, need, header = [], 0, length, False
    if poller.poll(0):  # a byte past the message, or its writer gone already: start nothing
        return None
    return b"".join(chunks)


def decode(body: bytes) -> _Message | None:
    """(argv, cwd, env or None, cgroup or None) from a message's body; None if it does not parse."""
    fields = body.split(b"\0")
    if len(fields) < 4 or not _count(fields[2]) or not (_count(fields[3]) or fields[3] == b"-"):
        return None
    argc = int(fields[2])
    envc = 0 if fields[3] == b"-" else int(fields[3])
    if argc < 1 or len(fields) != 4 + argc + envc or not fields[4]:
        return None
    env: dict[bytes, bytes] | None = None
    if fields[3] != b"-":
        env = {}
        for entry in fields[4 + argc :]:
            key, eq, value = entry.partition(b"=")
            if not key or not eq:
                return None
            env[key] = value
    cgroup = os.fsdecode(fields[0]) if fields[0] else None
    return fields[4 : 4 + argc], fields[1], env, cgroup


def _count(field: bytes) -> bool:
    # Digits, and few: int() refuses more than 4300 of them (an exception, not a refusal).
    return field.isdigit() and len(field) <= 9


def encode(argv: list[str], cwd: str | None, env: dict[str, str] | None, cgroup: str | None) -> bytes:
    """The message that starts ``argv`` in ``cwd`` (None: where the supervisor is) with ``env``
    (None: the supervisor's own) in ``cgroup``.  ValueError for what no exec can carry (a NUL, an
    environment name with ``=``), or a message over :data:`MAX_MESSAGE`."""
    if not argv or not argv[0]:
        raise ValueError("no program to run")
    fields = [os.fsencode(cgroup or ""), os.fsencode(cwd or ""), b"%d" % len(argv)]
    fields.append(b"-" if env is None else b"%d" % len(env))
    fields += [os.fsencode(arg) for arg in argv]
    for key, value in (env or {}).items():
        name = os.fsencode(key)
        if not name or b"=" in name:
            raise ValueError(f"illegal environment variable name: {key!r}")
        fields.append(name + b"=" + os.fsencode(value))
    if any(b"\0" in field for field in fields):
        raise ValueError("embedded null byte")
    body = b"\0".join(fields)
    if len(body) > MAX_MESSAGE:
        raise ValueError(f"the command line and environment take {len(body)} bytes, over {MAX_MESSAGE}")
    return MAGIC + len(body).to_bytes(4, "big") + body


def command(python: str, path: str, ctl: int) -> list[str]:
    """The command line that starts the supervisor at ``path`` with the control socket ``ctl``."""
    return [python, "-I", "-S", "-c", BOOT, path, str(ctl)]


def _answer(ctl: int, report: int, cgroup: bool) -> bool:
    """Tell orchestrate how the start went (the report pipe closes on a successful exec)."""
    told = b""
    while chunk := os.read(report, 64):
        told += chunk
    if b"e" in told:
        errno = told[told.index(b"e") + 1 :]
        message = b"err %s\n" % (errno or b"0")
    else:
        message = b"ok %d %d\n" % (_State.agent or 0, int(cgroup and b"c" not in told))
    try:
        os.write(ctl, message)
    except OSError:
        return False
    return message.startswith(b"ok")


# --- cgroups (also used by orchestrate) ------------------------------------------------------


def cgroup_kill(path: str, use_kill_file: bool = True) -> None:
    """SIGKILL every process in the cgroup ``path`` and its children, at once.

    ``cgroup.kill`` (Linux 5.14) does it in the kernel, race free.  Without it the cgroup is frozen
    first, so that nothing in it can fork or exit while its members are listed and killed."""
    if use_kill_file and _write(os.path.join(path, "cgroup.kill"), "1"):
        return
    for root, _, _ in os.walk(path):
        _write(os.path.join(root, "cgroup.freeze"), "1")
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and not _frozen(path):
        time.sleep(0.005)
    for root, _, _ in os.walk(path):
        try:
            with open(os.path.join(root, "cgroup.procs")) as procs:
                pids = [int(p) for p in procs.read().split()]
        except OSError:
            continue
        for pid in pids:  # frozen, so none of these numbers can be freed and reused meanwhile
            try:
                os.kill(pid, _signal.SIGKILL)
            except OSError:
                pass
    for root, _, _ in os.walk(path):
        _write(os.path.join(root, "cgroup.freeze"), "0")


def cgroup_remove(path: str, seconds: float) -> bool:
    """Remove the cgroup ``path`` (and any the agent made under it) once its processes are gone;
    True when it is gone.  Bounded by ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            for root, _, _ in os.walk(path, topdown=False):
                os.rmdir(root)
        except FileNotFoundError:
            pass
        except OSError:  # busy: a process is still on its way out
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
            continue
        return not os.path.isdir(path)


SWEEP_REMOVALS = 4  # leftover cgroups removed per run at most (each rmdir may wait a grace period)
SWEEP_TRIES = 16  # and names tried: a leftover that is not empty is skipped, at a cost
# A live run's cgroup is empty only until its agent joins it, at most MESSAGE_SECONDS after it was
# made: a younger one is never swept, whatever its name says.  (A run in another pid namespace that
# shares this directory, under unshare or a sandbox without a cgroup namespace, has a PID that is no
# process here: without this its cgroup, made and not yet joined, was removed, and its agent ran
# outside it; tests/test_review_cgroup_sweep.py.)
SWEEP_AGE = 2 * MESSAGE_SECONDS


def cgroup_sweep(
    parent: str, removals: int = SWEEP_REMOVALS, tries: int = SWEEP_TRIES, age: float = SWEEP_AGE
) -> list[str]:
    """Remove a few cgroups under ``parent`` left over by runs whose orchestrate is dead (a
    supervisor SIGKILLed never removes its own, and its orchestrate may be gone too): only names of
    ours, ``orchestrate-PID-N``, whose PID is no live process, made ``age`` seconds ago or more, and
    only empty ones (the kernel refuses to remove a cgroup with a process or a cgroup in it); at
    most ``removals`` of them and ``tries`` attempts.  The names removed."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    removed: list[str] = []
    for name in names:
        if len(removed) >= removals or tries <= 0:
            break
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "orchestrate" or not (parts[1].isdigit() and parts[2].isdigit()):
            continue
        if _alive(int(parts[1])):  # its orchestrate (or a process that took its number) may use it
            continue
        tries -= 1
        path = os.path.join(parent, name)
        try:
            if time.time() - os.stat(path).st_mtime < age:  # noqa: PTH116  # (clock set back: young)
                continue
            os.rmdir(path)
        except OSError:  # not empty (a process escaped into it is left to whoever sees it), or gone
            continue
        removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's (EPERM), or no pid at all: not ours to judge
        return pid > 0
    return True


def _frozen(path: str) -> bool:
    try:
        with open(os.path.join(path, "cgroup.events")) as events:
            return "frozen 1" in events.read()
    except OSError:
        return True


def _write(path: str, text: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError:
        return False
    return True


if __name__ == "__main__":
    main(sys.argv[1:])
