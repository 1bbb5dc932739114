# ruff: noqa: PTH106, PTH112, PTH118, PTH123, PTH208, SIM105
# (pathlib and contextlib would double the start-up time of this process)
"""The supervisor: a small process between orchestrate and an agent, so that no process outlives its run.

Run as ``python -I -S supervisor.py CTL_FD CGROUP -- ARGV...``.  It is a standalone file: it imports
nothing of orchestrate and little of the standard library (no ``signal``, whose enums cost more than
the rest), so it starts in about 10 ms.  It

- makes itself a child subreaper, so every orphan of the agent's tree (a daemon that double-forked, a
  grandchild that called ``setsid``) is re-parented to it and stays findable;
- forks the agent with its own stdin, stdout and stderr (pipes and terminals go straight to the
  agent), in a process group of its own (the terminal's foreground group when stdin is a terminal),
  with ``PR_SET_PDEATHSIG`` so that the agent dies when the supervisor does, and in the cgroup CGROUP
  (a directory; ``-`` for none);
- answers on the control socket CTL_FD ``ok PID IN_CGROUP`` once the agent runs, or ``err ERRNO``;
- obeys lines on the control socket: ``signal N`` (the agent), ``group N`` (the agent's process
  group), ``kill`` (everything).  End of file (orchestrate closed it, or died, even by SIGKILL) is
  ``kill``;
- forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 it receives to the agent;
- once the agent has exited, or on ``kill``: kills every descendant (``cgroup.kill``, then the process
  tree under it, each signalled through a pidfd), reaps them, removes the cgroup, and exits with the
  agent's status (its exit code, or the same signal raised again), so the caller sees the agent's.

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

__all__ = ["cgroup_kill", "cgroup_remove"]

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


# --- the agent -------------------------------------------------------------------------------


def _start(argv: list[str], cgroup: str | None, report: int) -> int:
    """Fork and exec the agent; its pid.  Failures to exec come back through ``report``."""
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:
        _become_agent(cgroup, parent, report)
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(report, b"e%d" % (exc.errno or 0))
    except BaseException:  # anything at all: never return into the supervisor's code in the child
        os.write(report, b"e0")
    os._exit(127)


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
    if agent is None or _State.status is not None or len(words) != 2 or not words[1].isdigit():
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


def main(args: list[str]) -> None:
    ctl, cgroup, argv = int(args[0]), (None if args[1] == "-" else args[1]), args[3:]
    os.set_inheritable(ctl, False)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, [])
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    _signal.set_wakeup_fd(wake_write)
    for sig in FORWARDED:
        _catch(sig, _forward)
    _catch(_signal.SIGCHLD, _wake)
    report_read, report_write = os.pipe()
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _State.agent = _start(argv, cgroup, report_write)
    except OSError as exc:
        os.write(ctl, b"err %d\n" % (exc.errno or 0))
        os._exit(127)
    os.close(report_write)
    if not _answer(ctl, report_read, cgroup is not None):
        _finish(cgroup)
        os._exit(127)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the agent alone holds its pipes: their end of file is its own
        os.dup2(null, fd)
    for early in _State.pending:
        _forward(early, None)
    _serve(ctl, wake_read)
    _finish(cgroup)
    _exit_as(_State.status)


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
