# ruff: noqa: SIM105
# (contextlib.suppress: contextlib is not loaded before the early spawn, see the imports)
"""Containment: no process an agent starts outlives its run, whatever happens to us.

Three mechanisms, the strongest the machine allows (see SAFETY in the README):

``cgroup``      Linux with a writable cgroup v2 hierarchy: the agent is born in a cgroup of its own
                (under ours) and at the end ``cgroup.kill`` ends everything in it at once.
``supervisor``  Linux: a small process between us and the agent (``supervisor.py``) is the agent's
                parent and a child subreaper, so every orphan of the tree (``setsid``, double fork)
                comes back to it; it kills the whole tree when the agent exits, when we say so, and
                when we die, even by SIGKILL (its control socket closes).  The agent has
                ``PR_SET_PDEATHSIG``.  The cgroup mechanism runs on top of this one.
``group``       elsewhere (or ``ORCHESTRATE_SUPERVISOR=0``): the agent leads its own process group
                and the group is signalled, as before; a process that leaves the group escapes.

``ORCHESTRATE_CGROUPS=0`` turns the cgroup off (the supervisor alone).  Signals to one process go
through pidfds, so a number that the kernel has given to another process is never signalled.

Starting (:func:`prepare`) needs no event loop: the CLI's early start (cli/early.py) spawns the
supervisor before anyio is imported, so anyio is imported by the async methods that use it.
"""

from __future__ import annotations

import _socket as socket  # the C module: socket.py's enums and wrappers cost the early spawn ~2 ms
import os
import select
import sys
import time

from ..errors import SpawnError
from . import supervisor

# Neither typing nor contextlib, itertools or collections at run time: this module is imported
# before the early start's spawn, and typing (with re, enum, warnings) and contextlib (with
# collections, functools, types) cost that spawn ~10 ms.  mypy takes any TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable
    from signal import Signals
    from typing import Literal

    Mechanism = Literal["cgroup", "supervisor", "group"]
else:
    import _signal as signal  # likewise: signal.py imports enum to make Signals

    Mechanism = str

__all__ = ["Containment", "Launch", "Mechanism", "kill_all", "prepare"]

SUPERVISOR = supervisor.__file__
_HANDSHAKE_SECONDS = 30.0  # a fork and an exec; only a machine in trouble comes near this
_RELEASE_SECONDS = 2.0


class Containment:
    """What the process layer holds for one agent's tree: :class:`Supervised` or :class:`GroupOnly`.
    (A base class, not a typing.Protocol: typing is not loaded before the early spawn.)"""

    __slots__ = ()

    mechanism: Mechanism
    agent_pid: int
    """The agent's own pid (it leads its own process group)."""

    def signal(self, sig: Signals) -> None:
        """Signal the agent process itself (not its children)."""
        raise NotImplementedError

    def signal_group(self, sig: Signals) -> None:
        """Signal the agent's process group."""
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL everything in the tree, at once (idempotent, never blocks)."""
        raise NotImplementedError

    async def release(self) -> None:
        """After the process we spawned has exited: make sure nothing of the tree is left, and free
        what containment held (bounded)."""
        raise NotImplementedError


# --- the supervised tree -------------------------------------------------------------------------


def _never_reaped() -> bool:
    return True


class Supervised(Containment):
    """Our side of a supervisor: its control socket, and the run's cgroup if it has one.  (Plain
    classes here, not dataclasses: this module is on the early start's path, before the spawn.)"""

    __slots__ = ("_cgroup", "_ctl", "_pidfd", "_reaped", "agent_pid", "mechanism", "supervisor_pid")

    def __init__(self, agent_pid: int, mechanism: Mechanism, ctl: socket.socket, cgroup: str | None) -> None:
        self.agent_pid = agent_pid
        self.mechanism: Mechanism = mechanism
        self._ctl = ctl
        self._cgroup = cgroup
        self.supervisor_pid = 0
        self._reaped: Callable[[], bool] = _never_reaped
        self._pidfd: int | None = None  # the supervisor's, opened while it was certainly not reaped

    def signal(self, sig: Signals) -> None:
        self._tell(b"signal %d\n" % sig)

    def signal_group(self, sig: Signals) -> None:
        self._tell(b"group %d\n" % sig)

    def kill(self) -> None:
        self._tell(b"kill\n")
        # End of file says kill too, and shutdown() sends it even if a fork of ours holds a copy.
        try:
            self._ctl.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        # The agent runs as our user and may have stopped its supervisor (SIGSTOP): wake it up, so
        # it reads the kill.  release() finishes the job if it is stopped again.
        self._signal_supervisor(signal.SIGCONT)

    async def release(self) -> None:
        import anyio

        _LIVE.discard(self)
        self.kill()  # a supervisor still there (a caller gave up waiting) ends the tree now
        self._ctl.close()
        with anyio.move_on_after(_RELEASE_SECONDS / 2):
            while not self._reaped():  # noqa: ASYNC110 - our child watcher reaps it; no event to await
                await anyio.sleep(0.01)
        if not self._reaped():
            await self._kill_from_here()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if self._cgroup is not None:
            await _remove_cgroup(self._cgroup)

    async def _kill_from_here(self) -> None:
        """The supervisor did not end (stopped again by the agent, or stuck): kill its tree from
        here, then the supervisor.  While it lives nothing of its tree is re-parented away (it is
        their subreaper), and what we kill stays a zombie it has not reaped, so no number in the
        walk can be reused meanwhile; each kill goes through a pidfd after a parent check."""
        import anyio

        self._signal_supervisor(signal.SIGSTOP)  # it cannot reap (and free numbers) while we walk
        with anyio.move_on_after(_RELEASE_SECONDS):
            while True:
                trusted = {self.supervisor_pid}
                tree = supervisor._descendants(self.supervisor_pid)
                for pid in tree:
                    supervisor._kill(pid, trusted)
                if not tree:
                    break
                await anyio.sleep(0.005)
        self._signal_supervisor(signal.SIGKILL)

    def _signal_supervisor(self, sig: int) -> None:
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            elif self.supervisor_pid and not self._reaped():
                os.kill(self.supervisor_pid, sig)
        except OSError:
            pass

    def _tell(self, line: bytes) -> None:
        # Non-blocking and without SIGPIPE: a supervisor that is gone took the agent with it.
        try:
            self._ctl.send(line, socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT)
        except OSError:
            pass


async def _remove_cgroup(path: str) -> None:
    """What a supervisor that was killed could not do: kill what is left, remove the cgroup."""
    import anyio

    if supervisor.cgroup_remove(path, 0):  # the common case: the supervisor removed it already
        return
    supervisor.cgroup_kill(path)
    with anyio.move_on_after(_RELEASE_SECONDS):
        while not supervisor.cgroup_remove(path, 0):  # noqa: ASYNC110 - the kernel posts no event
            await anyio.sleep(0.01)


# --- the fallback: a process group ---------------------------------------------------------------


class GroupOnly(Containment):
    """The agent leads its own process group; the group is what we can reach."""

    __slots__ = ("_pidfd", "_reaped", "agent_pid", "mechanism")

    def __init__(self, agent_pid: int, reaped: Callable[[], bool]) -> None:
        self.agent_pid = agent_pid
        self._reaped = reaped
        self.mechanism: Mechanism = "group"
        self._pidfd: int | None = None
        # Opened while the child is certainly unreaped, so it is the agent's for good.
        try:
            self._pidfd = os.pidfd_open(self.agent_pid)
        except (AttributeError, OSError):
            pass

    def signal(self, sig: Signals) -> None:
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            elif not self._reaped():
                os.kill(self.agent_pid, sig)
        except OSError:
            pass

    def signal_group(self, sig: Signals) -> None:
        # While the leader is unreaped its number, and so the group's, cannot be taken by another.
        if not self._reaped():
            try:
                os.killpg(self.agent_pid, sig)
            except OSError:
                pass

    def kill(self) -> None:
        self.signal_group(signal.SIGKILL)  # an int at run time (the C module): as good to the kernel
        self.signal(signal.SIGKILL)

    async def release(self) -> None:
        _LIVE.discard(self)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


# --- starting -------------------------------------------------------------------------------------


class Launch:
    """A start being prepared: spawn :attr:`argv` passing :attr:`pass_fds`, then :meth:`started`
    (or :meth:`abandon` when the spawn failed).  Under a supervisor, what it starts goes over its
    control socket: given to :func:`prepare`, or later (the early start) to :meth:`send`."""

    __slots__ = ("_cgroup", "_cwd", "_message", "_ours", "_sent", "_target", "_theirs", "argv", "pass_fds")

    def __init__(
        self,
        argv: list[str],
        pass_fds: tuple[int, ...] = (),
        ours: socket.socket | None = None,
        theirs: socket.socket | None = None,
        cgroup: str | None = None,
        target: list[str] | None = None,
    ) -> None:
        self.argv = argv
        self.pass_fds = pass_fds
        self._ours = ours
        self._theirs = theirs
        self._cgroup = cgroup
        self._target: list[str] = [] if target is None else target
        self._cwd: str | None = None
        self._message = b""
        self._sent = 0  # bytes of the message on their way

    def address(self, argv: list[str], cwd: str | None, env: dict[str, str] | None) -> None:
        """What the supervisor is to start: ``argv`` in ``cwd`` with ``env`` (None: as the
        supervisor was spawned).  SpawnError for what no exec can carry."""
        try:
            self._message = supervisor.encode(argv, cwd, env, self._cgroup)
        except ValueError as exc:
            raise SpawnError(argv, str(exc)) from None
        self._target, self._cwd = list(argv), cwd

    def send(self) -> bool:
        """Send the message now, blocking (bounded): the early start, before any event loop.  False
        when the supervisor is gone or does not read it in time."""
        assert self._ours is not None and self._message
        poller = select.poll()
        poller.register(self._ours, select.POLLOUT)
        deadline = time.monotonic() + _HANDSHAKE_SECONDS
        while self._sent < len(self._message):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                self._send_some(self._ours)
            except BlockingIOError:
                poller.poll(left * 1000 + 1)
            except OSError:
                return False
        return True

    def _send_some(self, ours: socket.socket) -> None:
        # Never SIGPIPE: a supervisor gone is EPIPE here, and said by the handshake.
        self._sent += ours.send(memoryview(self._message)[self._sent :], socket.MSG_NOSIGNAL)

    async def _send_async(self) -> None:
        import anyio

        assert self._ours is not None
        with anyio.move_on_after(_HANDSHAKE_SECONDS):
            while self._sent < len(self._message):
                try:
                    self._send_some(self._ours)
                except BlockingIOError:
                    await anyio.wait_writable(self._ours)
                except OSError:
                    return  # the supervisor is gone: the handshake says so

    async def started(self, pid: int, reaped: Callable[[], bool]) -> Containment:
        """The containment of the process just spawned as ``pid``; SpawnError when the agent
        could not be started (the supervisor is then exiting: reap it)."""
        if self._ours is None:
            contained: Containment = GroupOnly(pid, reaped)
        else:
            self._close_theirs()
            pidfd = None
            try:
                pidfd = os.pidfd_open(pid)  # just spawned: not reaped, so this is our supervisor
            except (AttributeError, OSError):
                pass
            try:
                if not self._message:  # never told what to start: it exits when the socket closes
                    raise SpawnError(self._target, "its supervisor was not told what to start")
                await self._send_async()
                handshake = await self._handshake()
            except BaseException:  # cancelled too: the supervisor ends when it sees the socket close
                if pidfd is not None:
                    os.close(pidfd)
                self.abandon()
                raise
            handshake.supervisor_pid, handshake._reaped, handshake._pidfd = pid, reaped, pidfd
            contained = handshake
        _LIVE.add(contained)
        return contained

    @property
    def supervised(self) -> bool:
        """Whether :attr:`argv` starts the agent under a supervisor (else in a process group)."""
        return self._ours is not None

    @property
    def cgroup(self) -> str | None:
        return self._cgroup

    def spawned(self) -> None:
        """The spawn succeeded: close our copy of the supervisor's end of the control socket, so
        that its death is an end of file on ours (:meth:`started` does it too)."""
        self._close_theirs()

    def abandon(self) -> None:
        self._close_theirs()
        if self._ours is not None:
            self._ours.close()
        if self._cgroup is not None:
            supervisor.cgroup_remove(self._cgroup, 0)

    def inherit(self) -> None:
        """For a spawner without ``pass_fds`` handling of its own (ptyprocess): call in the child."""
        for fd in self.pass_fds:
            os.set_inheritable(fd, True)

    async def _handshake(self) -> Supervised:
        import anyio

        assert self._ours is not None
        answer = b""
        with anyio.move_on_after(_HANDSHAKE_SECONDS):
            while not answer.endswith(b"\n") and len(answer) < 128:
                await anyio.wait_readable(self._ours)
                try:
                    chunk = self._ours.recv(128)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                answer += chunk
        words = answer.split()
        if len(words) == 3 and words[0] == b"ok" and words[1].isdigit():
            mechanism: Mechanism = "cgroup" if words[2] == b"1" else "supervisor"
            return Supervised(int(words[1]), mechanism, self._ours, self._cgroup)
        raise SpawnError(self._target, _reason(words, self._cwd))

    def _close_theirs(self) -> None:
        if self._theirs is not None:
            self._theirs.close()
            self._theirs = None


def _reason(words: list[bytes], cwd: str | None) -> str:
    if len(words) == 3 and words[0] == b"err" and words[2] == b"cwd" and words[1].isdigit():
        # As pipes.spawn_failure says when the spawn's own chdir fails.
        if cwd is not None and not os.path.isdir(cwd):  # noqa: PTH112
            return f"the working directory {cwd!r} does not exist or is not a directory"
        return os.strerror(int(words[1])) if int(words[1]) else "its working directory could not be entered"
    if len(words) == 2 and words[0] == b"err" and words[1].isdigit() and int(words[1]):
        return os.strerror(int(words[1]))
    if words and words[0] == b"err":
        return "it could not be executed"
    return "its supervisor did not start it (no answer)"


def prepare(argv: list[str] | None, env: dict[str, str] | None = None) -> Launch:
    """How to start ``argv`` contained: through the supervisor where it can run, else as is.  The
    supervisor starts it where it was spawned, with ``env`` (the one the supervisor is spawned
    with: given again, since the supervisor's Python adds LC_CTYPE to its own under a C locale,
    PEP 538, which the agent must not inherit); None: what it starts is sent later
    (:meth:`Launch.address`, :meth:`Launch.send`; the supervisor alone)."""
    if not supervisor_usable():
        if argv is None:
            raise SpawnError([], "no supervisor on this machine")
        return Launch(list(argv), target=argv)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    cgroup = new_cgroup()
    wrapped = supervisor.command(sys.executable, SUPERVISOR, theirs.fileno())
    launch = Launch(wrapped, (theirs.fileno(),), ours, theirs, cgroup)
    if argv is not None:
        try:
            launch.address(argv, None, env)
        except SpawnError:
            launch.abandon()
            raise
    return launch


def supervisor_usable() -> bool:
    return (
        sys.platform == "linux"
        and bool(sys.executable)
        and os.environ.get("ORCHESTRATE_SUPERVISOR", "1") != "0"
    )


def kill_all() -> None:
    """SIGKILL every live agent tree of this process, now (the CLI's second Ctrl-C)."""
    for contained in list(_LIVE):
        contained.kill()


_LIVE: set[Containment] = set()


# --- cgroups ----------------------------------------------------------------------------------


_made = [0]  # cgroups made by this process (itertools.count: not loaded before the early spawn)
_cgroup_parent: list[str | None] = []  # found once: [] not looked yet, [None] none usable


def new_cgroup() -> str | None:
    """A new, empty cgroup for one run, under ours; None where cgroups cannot be used."""
    if os.environ.get("ORCHESTRATE_CGROUPS", "1") == "0":
        return None
    if not _cgroup_parent:
        _cgroup_parent.append(_find_our_cgroup())
    parent = _cgroup_parent[0]
    if parent is None:
        return None
    for _ in range(100):  # a name taken is left over from a dead process that had our pid
        _made[0] += 1
        path = os.path.join(parent, f"orchestrate-{os.getpid()}-{_made[0]}")  # noqa: PTH118
        try:
            os.mkdir(path)  # noqa: PTH102
        except FileExistsError:
            continue
        except OSError:
            _cgroup_parent[0] = None  # not writable here: do not try again for every run
            return None
        return path
    return None


def _find_our_cgroup(pid: str = "self") -> str | None:
    """Our own cgroup's directory in the cgroup v2 hierarchy, if one is mounted (or process
    ``pid``'s: a warm server's run joins its command's, cli/warm_server.py)."""
    try:
        with open("/proc/self/mountinfo") as mountinfo:  # noqa: PTH123
            mounts = [line.split(" - ", 1) for line in mountinfo]
        with open(f"/proc/{pid}/cgroup") as own:  # noqa: PTH123
            ours = next((line[3:].strip() for line in own if line.startswith("0::")), None)
    except OSError:
        return None
    if ours is None or not ours.startswith("/"):
        return None
    for mount in mounts:
        if len(mount) != 2 or not mount[1].startswith("cgroup2 "):
            continue
        fields = mount[0].split()
        root, point = _unescape(fields[3]).rstrip("/"), _unescape(fields[4])
        if ours == root or ours.startswith(root + "/"):  # the mount shows our part of the tree
            path = point + ours[len(root) :]
            return path if os.path.isdir(path) else None  # noqa: PTH112
    return None


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field
