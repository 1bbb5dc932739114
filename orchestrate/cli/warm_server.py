"""``orchestrate warm``: everything a run needs loaded once, each ``orchestrate run`` a fork of it.

The command's side is cli/warm.py (read it first: what is handed over, and why it is safe). Here,
the server (what it loads: cli/warm_load.py; a request and its checks: cli/warm_request.py; its fork
becoming the run: cli/warm_child.py): it loads the CLI, every built-in executor with its driver and
normalizer, the store and the entry models' validators (:func:`preload`), then waits on its socket
(a directory of its own user, mode 0700). It waits for each command's request (at most
:data:`_REQUEST_SECONDS`) while it serves the others: one that connects and says nothing holds up
nobody. For each request it checks the peer is of its own user and lives in our namespaces and root
(:func:`in_our_namespaces`: not in a container sharing the socket), that the command is of the same
installation (interpreter, package directory, Python version), that no source file of the package
has changed on disk since it started (an upgrade, an edit: it then says no, so the command runs
cold, and stops taking runs), and that a child of its can take the command's nice value and resource
limits (only root raises them); then it forks, moves the child into the command's cgroup if it is
not ours (:func:`into_cgroup_of`; refused: the command runs cold), and the child waits for the
command's go (below). The child then becomes the run (:func:`_become`): the command's standard
streams as 0, 1 and 2 (in its encodings, buffered as its own were) and its terminal given to the
approval prompt (process/tty.py), its directory, umask, nice value, resource limits, environment and
arguments, a session of its own (no controlling terminal), no descriptor of the server's but the
command's, the signals as a fresh process has them; then ``orchestrate ARGS...`` as the command
would have run it (cli/early.py's ``command``: the early start included).

The go: the command stops waiting for our answer after a few seconds and runs cold (a server that
is stopped, or too slow), and it may do so just as we fork.  So the child runs nothing before the
command, having read its pid, says "g": a command that went cold never says it (its end closes, and
the child is killed having done nothing), and one that said it is committed to this run.

Process lifetime: each child has ``PR_SET_PDEATHSIG`` (the server's death kills it, and its
supervisor then the agent's tree); the server watches each command's end of the socket and kills
the child when it closes (the command was killed); SIGTERM, SIGINT or SIGHUP stop the server:
it takes no more runs, passes SIGTERM to the running ones and waits for them (at most
:data:`STOP_SECONDS`).  With no run for ``idle`` seconds it exits.
"""

from __future__ import annotations

import contextlib
import gc
import marshal
import os
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from ..process import supervisor
from ..process.prestart import vouch
from .warm import peer, socket_path, trusted_directory
from .warm_child import as_at_a_start, close_inherited, run_command, take_streams
from .warm_load import MAX_LEARNED, fingerprint, learnable, load_quietly, preload, vouchable
from .warm_request import (
    MAX_FDS,
    MAX_REQUEST,
    Request,
    can_become,
    in_our_namespaces,
    into_cgroup_of,
    parse_request,
    take_limits,
)

__all__ = ["STOP_SECONDS", "WarmServer", "listening", "preload", "stop_server"]

STOP_SECONDS = 10.0
_REQUEST_SECONDS = 2.0  # the command sends its request right after connecting (then: closed)
_MAX_WAITING = 64  # connections whose request has not come: more are closed at once (they go cold)
_PAUSE_SECONDS = 0.1  # no descriptor left to accept with: we try again after this


@dataclass(eq=False)
class WarmServer:
    """The listening socket and the runs forked from it (see the module's docstring)."""

    path: str = field(default_factory=socket_path)
    idle: float | None = 3600.0
    said: Callable[[str], None] = field(default=lambda line: _say(line))
    _children: dict[int, socket.socket] = field(default_factory=dict)
    _stopping: float | None = None  # monotonic time the stop began
    _selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    _inode: int = 0
    _learning: dict[int, bytearray] = field(default_factory=dict)  # a run's pipe -> what it said
    _requests: dict[socket.socket, float] = field(default_factory=dict)  # not read yet: deadline
    _paused: float | None = None  # out of descriptors: accepting again at this monotonic time
    _go: dict[int, int] = field(default_factory=dict)  # child waiting for its go: the pipe's write end

    def run(self) -> int:
        """Serve until stopped or idle; the exit code."""
        names = preload()
        loaded = fingerprint()
        listener = self._listen()
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        selector = self._selector
        selector.register(listener, selectors.EVENT_READ, "listen")
        selector.register(wake_r, selectors.EVENT_READ, "wake")
        stop = [False]

        def stop_now(sig: int, frame: object) -> None:
            stop[0] = True

        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda sig, frame: None)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, stop_now)
        gc.collect()
        gc.freeze()  # what the runs share with us stays shared: the collector never touches it
        self.said(f"orchestrate warm: {len(names)} modules loaded, listening on {self.path}")
        last = time.monotonic()
        listening = True
        try:
            while True:
                if stop[0] and listening:
                    listening = self._close(selector, listener)
                    self._stop_children()
                if not listening and (not self._children or self._overdue()):
                    return 0
                timeout = 1.0 if not listening else self._idle_left(last)
                if timeout is not None and timeout <= 0:
                    self.said("orchestrate warm: idle, stopping")
                    return 0
                if listening:
                    self._resume(selector, listener)
                soonest = [*self._requests.values(), *([self._paused] if self._paused is not None else [])]
                if soonest:
                    first = min(soonest) - time.monotonic()
                    timeout = max(0.0, first if timeout is None else min(timeout, first))
                for key, _ in selector.select(timeout):
                    if selector.get_map().get(key.fd) is not key:
                        continue  # closed by an event before it in this batch (a reaped run's)
                    conn: socket.socket = key.fileobj  # type: ignore[assignment]
                    if key.data == "wake":
                        with contextlib.suppress(OSError):
                            while os.read(wake_r, 512):
                                pass
                        self._reap()
                    elif key.data == "learn":
                        if not self._learn(key.fd, selector):
                            self.said("orchestrate warm: a module a run needed started a thread, stopping")
                            stop[0] = True
                    elif key.data == "listen":
                        if self._accept(selector, listener):
                            last = time.monotonic()
                    elif key.data == "request":
                        del self._requests[conn]
                        selector.unregister(conn)
                        if self._serve(conn, selector, loaded, listener, wake_r, wake_w):
                            self.said("orchestrate warm: the installation changed, stopping")
                            stop[0] = True
                    elif key.data == "go":
                        self._let_go(conn, selector)
                    else:
                        self._command_gone(conn, selector)
                self._expire(selector)
                if self._children:
                    last = time.monotonic()
        finally:
            if listening:
                self._close(selector, listener)
            signal.set_wakeup_fd(-1)
            os.close(wake_r)
            os.close(wake_w)

    # --- the socket ------------------------------------------------------------------------------

    def _listen(self) -> socket.socket:
        path = Path(self.path)
        directory = path.parent
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not trusted_directory(self.path):
            raise SystemExit(
                f"orchestrate warm: {directory} must be a directory of this user that nobody else "
                f"may open (mode 0700); it is not"
            )
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            probe.connect(self.path)
        except OSError:
            pass  # nobody listens: a socket left by a server that died is replaced below
        else:
            raise SystemExit(f"orchestrate warm: a server already listens on {self.path}")
        finally:
            probe.close()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Bound under a name of our own and renamed over the path: two servers starting at once
        # cannot both unlink and bind, and a command never sees the path missing.
        staging = path.with_name(f"{path.name}.{os.getpid()}")
        staging.unlink(missing_ok=True)
        listener.bind(str(staging))
        staging.rename(path)
        self._inode = path.stat().st_ino
        listener.listen(64)
        listener.setblocking(False)
        return listener

    def _accept(self, selector: selectors.BaseSelector, listener: socket.socket) -> bool:
        """A command connecting: its request is read when it comes (by its deadline).  With
        :data:`_MAX_WAITING` requests not yet come, it is closed at once (it runs cold); with no
        descriptor left (runs, connections), we stop accepting for :data:`_PAUSE_SECONDS` (the
        listening socket would stay readable: a loop at full CPU) and those waiting in the queue
        connect then, or give up and run cold."""
        try:
            accepted, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:  # EMFILE, ENFILE, ENOBUFS: never the end of the server, or of its runs
            selector.unregister(listener)
            self._paused = time.monotonic() + _PAUSE_SECONDS
            return False
        if len(self._requests) >= _MAX_WAITING:
            accepted.close()
            return True
        accepted.setblocking(False)
        selector.register(accepted, selectors.EVENT_READ, "request")
        self._requests[accepted] = time.monotonic() + _REQUEST_SECONDS
        return True

    def _resume(self, selector: selectors.BaseSelector, listener: socket.socket) -> None:
        if self._paused is not None and time.monotonic() >= self._paused:
            self._paused = None
            selector.register(listener, selectors.EVENT_READ, "listen")

    def _close(self, selector: selectors.BaseSelector, listener: socket.socket) -> bool:
        if self._paused is None:
            selector.unregister(listener)
        self._paused = None
        listener.close()
        self._expire(selector, everyone=True)  # their commands go cold
        with contextlib.suppress(OSError):
            if Path(self.path).stat().st_ino == self._inode:  # not a newer server's socket
                Path(self.path).unlink()
        self._stopping = time.monotonic()
        return False

    def _idle_left(self, last: float) -> float | None:
        if self.idle is None or self._children:
            return None
        return last + self.idle - time.monotonic()

    def _overdue(self) -> bool:
        return self._stopping is not None and time.monotonic() - self._stopping > STOP_SECONDS

    def _expire(self, selector: selectors.BaseSelector, everyone: bool = False) -> None:
        """Close the connections whose request has not come in time (their commands go cold)."""
        now = time.monotonic()
        for conn, deadline in list(self._requests.items()):
            if everyone or deadline <= now:
                del self._requests[conn]
                selector.unregister(conn)
                conn.close()

    # --- the runs --------------------------------------------------------------------------------

    def _serve(
        self,
        conn: socket.socket,
        selector: selectors.BaseSelector,
        loaded: dict[str, tuple[int, int]],
        listener: socket.socket,
        *pipe: int,
    ) -> bool:
        """Take one command's request (it is there: the socket was readable): fork its run, waiting
        for the command's go, or say no.  True if we are out of date."""
        request: Request | None = None
        pid = 0
        try:
            request = self._read(conn)
            if request is None or not in_our_namespaces(request.peer) or not can_become(request):
                conn.send(b"n")
                return False
            if fingerprint() != loaded:
                conn.send(b"n")
                return True
            go_r, go_w = os.pipe2(os.O_CLOEXEC)
            learn, told = os.pipe2(os.O_CLOEXEC)
            try:
                pid = os.fork()
            except OSError:
                for fd in (go_r, go_w, learn, told):
                    os.close(fd)
                raise
            if pid == 0:
                os.close(learn)
                self._become(conn, request, listener, selector, (*pipe, *self._learning, go_w), go_r, told)
            os.close(go_r)
            os.close(told)
            os.set_blocking(learn, False)
            self._learning[learn] = bytearray()
            selector.register(learn, selectors.EVENT_READ, "learn")
            self._children[pid] = conn
            self._go[pid] = go_w
            if not into_cgroup_of(request.peer, pid):
                self._never_go(pid)
                conn.send(b"n")
                return False
            self.said(f"orchestrate warm: run {pid}")
            conn.send(b"p" + pid.to_bytes(4, sys.byteorder, signed=True))  # (failed: _never_go below)
            selector.register(conn, selectors.EVENT_READ, "go")
            conn = None  # type: ignore[assignment]  # kept until its child is reaped
        except OSError:
            # The command went away (it stopped waiting and runs cold), or the fork failed: a
            # child never let go is killed having done nothing.
            if pid:
                self._never_go(pid)
        finally:
            if request is not None:
                for fd in request.fds:
                    os.close(fd)
            if conn is not None:
                conn.close()
        return False

    def _read(self, conn: socket.socket) -> Request | None:
        """The command's request, if it is of our user and our installation."""
        command, uid = peer(conn)
        data, ancillary, flags, _ = conn.recvmsg(MAX_REQUEST, socket.CMSG_SPACE(MAX_FDS * 4))
        fds: list[int] = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                count = len(payload) // 4
                fds.extend(struct.unpack(f"{count}i", payload[: count * 4]))
        request = None
        try:
            if uid == os.getuid() and not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                request = parse_request(marshal.loads(data), fds, command)
        except (ValueError, EOFError, TypeError):
            request = None
        if request is None:
            for fd in fds:
                os.close(fd)
        return request

    def _let_go(self, conn: socket.socket, selector: selectors.BaseSelector) -> None:
        """The command has read its run's pid: "g", and the run starts; anything else (its end
        closed: it stopped waiting and runs cold), and the child is killed having done nothing."""
        selector.unregister(conn)
        pid = next(pid for pid, theirs in self._children.items() if theirs is conn)
        try:
            said = conn.recv(16)
        except OSError:
            said = b""
        go = self._go.pop(pid)
        try:
            if said == b"g" and os.write(go, b"g") == 1:
                selector.register(conn, selectors.EVENT_READ, "command")
                return
        except OSError:
            pass  # the child is gone: reaped below
        finally:
            os.close(go)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)

    def _never_go(self, pid: int) -> None:
        go = self._go.pop(pid, None)
        if go is not None:
            os.close(go)  # the child reads the end of its pipe: it exits
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)

    def _command_gone(self, conn: socket.socket, selector: selectors.BaseSelector) -> None:
        """The command's end closed (or it wrote, which it never does): it was killed, so is its run."""
        selector.unregister(conn)
        for pid, theirs in self._children.items():
            if theirs is conn:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)  # its supervisor kills the agent's tree
                break

    def _reap(self) -> None:
        while self._children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self._children.pop(pid, None)
            if conn is None:
                continue
            go = self._go.pop(pid, None)
            if go is not None:  # never let go (the stop's SIGTERM): it ran nothing, so it says nothing
                os.close(go)  # (the command, told no status, sees its end close: it runs cold)
            elif os.WIFSIGNALED(status):
                reply = b"s" + os.WTERMSIG(status).to_bytes(4, sys.byteorder, signed=True)
            else:
                reply = b"x" + os.waitstatus_to_exitcode(status).to_bytes(4, sys.byteorder, signed=True)
            if go is None:
                with contextlib.suppress(OSError):
                    conn.send(reply)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(conn)  # registered while the command is alive
            conn.close()

    def _learn(self, fd: int, selector: selectors.BaseSelector) -> bool:
        """Read what a run says it had to import (:func:`_become`); at its end, import here those we
        can vouch for, so that the next runs find them loaded.  False if that started a thread (no
        fork is safe then: the server stops)."""
        heard = self._learning[fd]
        try:
            while chunk := os.read(fd, 65536):
                heard += chunk
                if len(heard) > MAX_LEARNED:
                    heard.clear()  # a run does not need that many: not a list of modules
                    break
            else:
                raise EOFError
        except BlockingIOError:
            return True
        except (EOFError, OSError):
            pass
        selector.unregister(fd)
        os.close(fd)
        del self._learning[fd]
        # Only what we would have loaded ourselves (the standard library's, ours, our dependencies'),
        # vouched for with all it loads, as the preload's: a module of anything else (a site's
        # instrumentation, a plugin) stays out, so it never stops the runs forking their supervisors.
        names = [n for n in heard.decode(errors="replace").split() if learnable(n) and vouchable(n)]
        before = set(sys.modules)
        learned = [n for n in names if load_quietly(n)]
        if learned:
            vouch(set(sys.modules) - before)
            self.said(f"orchestrate warm: {len(learned)} more modules loaded, that a run needed")
        return len(os.listdir("/proc/self/task")) == 1  # noqa: PTH208

    def _stop_children(self) -> None:
        for pid in self._children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)

    # --- the child: the run ------------------------------------------------------------------------

    def _become(
        self,
        conn: socket.socket,
        request: Request,
        listener: socket.socket,
        selector: selectors.BaseSelector,
        pipe: tuple[int, ...],
        go: int,
        told: int,
    ) -> NoReturn:
        code = 1
        loaded = set(sys.modules)
        try:
            server = os.getppid()
            supervisor.die_with_parent()
            if os.getppid() != server:  # the server died before the line above
                os._exit(137)
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for fd in (*pipe, *self._go.values()):
                os.close(fd)
            selector.close()
            listener.close()
            for other in (*self._children.values(), *self._requests):
                other.close()
            conn.close()
            if os.read(go, 1) != b"g":  # (module docstring: the go)
                os._exit(1)  # the command runs cold: nobody waits for this status
            os.close(go)
            os.setsid()  # no controlling terminal: the command's terminal is used as a plain file
            take_streams(request.fds, request.terminal, request.streams, request.unbuffered, request.peer)
            close_inherited()
            os.chdir(request.cwd)
            os.umask(request.umask)
            take_limits(request)  # (the agent gets them from the run, as from a cold one)
            os.environ.clear()
            os.environ.update(request.env)
            as_at_a_start()
            sys.argv = ["orchestrate", *request.args]
            code = run_command(request.args)
        except BaseException:  # anything: said on the command's stderr, never back in the server
            with contextlib.suppress(Exception):
                traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):  # what the server may load for the next runs
                os.set_blocking(told, False)
                os.write(told, "\n".join(sorted(set(sys.modules) - loaded)).encode()[:MAX_LEARNED])
            with contextlib.suppress(Exception):
                sys.stdout.flush()
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os._exit(code)


def listening(path: str) -> int | None:
    """The pid of the server of our user that listens on ``path`` (in a directory we trust), if any:
    the peer's credentials, as the kernel gives them."""
    if not trusted_directory(path):
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
        probe.settimeout(_REQUEST_SECONDS)
        try:
            probe.connect(path)
            pid, uid = peer(probe)
        except OSError:
            return None
    return pid if uid == os.getuid() and pid > 0 else None


def stop_server(path: str, pid: int) -> bool:
    """SIGTERM to the server ``pid``, then wait (bounded) for it and its socket to go: True once
    they have."""
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return False
    deadline = time.monotonic() + STOP_SECONDS + 5
    while time.monotonic() < deadline:
        if not Path(path).exists() and _gone(pid):
            return True
        time.sleep(0.05)
    return False


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"  # ended, its parent not told yet


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
