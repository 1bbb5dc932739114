# ruff: noqa: PTH100, PTH109, PTH117, PTH118, PTH120, SIM105
# (pathlib and contextlib: neither is loaded this early, see the imports)
"""``orchestrate run`` handed to a warm server: the run starts with everything already loaded.

A cold ``orchestrate run`` spends 250-400 ms of CPU loading Python's and our modules (pydantic,
anyio, click, the run) before its first entry, and the agents that answer fastest (Codex's
app-server in ~180 ms, the Codex ACP adapter in ~40 ms) then wait for us.  ``orchestrate warm``
(cli/warm_server.py) loads all of it once and waits on a Unix socket; this module, the first thing
the command does, hands it the run: its arguments, working directory, environment, umask and its
standard streams (and its terminal, if it has one) as file descriptors with their encodings, its
nice value and its resource limits.  The server forks a child
that *is* the run, with those streams as its own: it prints straight to our stdout, reads our
stdin, asks on our terminal.  It starts when we say "g", having read its pid: we stop waiting for
the server after a few seconds and run cold, and a child we never said it to never runs (else the
prompt could run twice).  We only wait: signals we get (Ctrl-C, SIGTERM, a window resize) are
passed to the child, Ctrl-Z stops it with us (it is in no job of the shell's: a cold run stops as
part of ours), and its exit status becomes ours (the same code, or the same signal).

Nothing here is required: no server, a socket we do not trust, a server of another version or
installation, or any error before the child exists, and the command goes on cold, as if this
module did not exist (:func:`hand_over` returns).  ``ORCHESTRATE_WARM=0`` (or off, false, no)
never tries.  Only ``orchestrate run`` goes warm: the command whose first entry is timed.

The socket's directory must be ours and closed to everyone else (mode 0700, no symlink): a
socket planted by another user would be handed our environment (API keys) and our terminal.  The
check comes before the connect, so the command also checks its peer is of its own user
(SO_PEERCRED) before it sends anything (a directory swapped in between, a socket another user
listens on moved into ours), and the server checks its peer likewise.

If we die (even SIGKILL) the server sees our end of the socket close and kills the child, whose
supervisor then kills the agent's tree, as when a cold run is killed; if the server dies, its
children die with it (PR_SET_PDEATHSIG) and we exit 1 saying so.
"""

from __future__ import annotations

import marshal
import os
import sys

from ..process import supervisor
from .early import OFF

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket
    import signal as _signal
    from typing import NoReturn
else:
    import _signal  # the C module: signal.py imports enum (~3 ms before anything)

__all__ = [
    "FORWARDED",
    "PROTOCOL",
    "WARM_ENV",
    "WARM_SOCKET_ENV",
    "hand_over",
    "package_dir",
    "peer",
    "socket_path",
    "trusted_directory",
]

WARM_ENV = "ORCHESTRATE_WARM"
WARM_SOCKET_ENV = "ORCHESTRATE_WARM_SOCKET"
PROTOCOL = 2
# What a terminal or a caller sends that the run itself must see: what a supervisor passes on to
# its agent, and a resized window (and SIGTSTP: Ctrl-Z stops the run with us, see _wait).
FORWARDED = (*supervisor.FORWARDED, _signal.SIGWINCH)
_CONNECT_SECONDS = 2.0  # a server that does not take us at once is busy or stuck: go cold
_REPLY_SECONDS = 5.0  # its fork; a machine in trouble gets the cold path


def socket_path(env: dict[str, str] | os._Environ[str] | None = None) -> str:
    """Where the warm server listens: ``$ORCHESTRATE_WARM_SOCKET``, else ``orchestrate/warm.sock`` in
    ``$XDG_RUNTIME_DIR``, else in ``/tmp/orchestrate-UID``."""
    env = os.environ if env is None else env
    given = env.get(WARM_SOCKET_ENV)
    if given:
        return os.path.abspath(given)
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "orchestrate", "warm.sock")
    return os.path.join("/tmp", f"orchestrate-{os.getuid()}", "warm.sock")


def trusted_directory(path: str) -> bool:
    """Whether the directory holding the socket ``path`` is a real directory of ours that nobody
    else can write to or look into (lstat: a symlink is not followed, and not trusted)."""
    try:
        info = os.lstat(os.path.dirname(path))
    except OSError:
        return False
    return (
        (info.st_mode & 0o170000) == 0o040000  # S_ISDIR, without loading stat
        and info.st_uid == os.getuid()
        and info.st_mode & 0o077 == 0
    )


def hand_over(args: list[str]) -> None:
    """Run ``orchestrate ARGS...`` in the warm server and exit with its status; return (having
    changed nothing) when it cannot be, so the caller goes on cold."""
    if args[:1] != ["run"] or os.environ.get(WARM_ENV, "1").strip().lower() in OFF:
        return
    path = socket_path()
    if not trusted_directory(path):
        return  # no server here (the usual case): a cold start that has loaded nothing more
    import _socket  # not socket.py: it imports enum

    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET | _socket.SOCK_CLOEXEC)
    try:
        child = _start(conn, path, args)
    except OSError:
        child = None
    if child is None:
        conn.close()
        return
    _wait(conn, child)


def _start(conn: _socket.socket, path: str, args: list[str]) -> int | None:
    import _socket

    conn.settimeout(_CONNECT_SECONDS)
    conn.connect(path)
    if peer(conn)[1] != os.getuid():
        return None  # a server of another user: it is told nothing
    fds = [0, 1, 2]
    try:
        tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        tty = -1
    try:
        for fd in fds:
            os.fstat(fd)  # a closed stream: the cold path says what it says about it
        if tty >= 0:
            fds.append(tty)
        umask = os.umask(0o22)
        os.umask(umask)
        import resource  # here only: the cold path does not need it

        limits = {
            number: resource.getrlimit(number)
            for number in {getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_")}
        }
        request = (
            PROTOCOL,
            sys.executable,
            package_dir(),
            sys.version,
            args,
            os.getcwd(),
            dict(os.environ),
            umask,
            tty >= 0,
            os.getpriority(os.PRIO_PROCESS, 0),
            limits,
            (
                bool(getattr(sys.stdout, "write_through", False)),  # -u, PYTHONUNBUFFERED
                tuple(_settings(s) for s in (sys.stdin, sys.stdout, sys.stderr)),
            ),
        )
        ints = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
        conn.sendmsg([marshal.dumps(request)], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, ints)])
    finally:
        if tty >= 0:
            os.close(tty)
    conn.settimeout(_REPLY_SECONDS)
    reply = conn.recv(64)
    if reply[:1] != b"p" or len(reply) != 5:
        return None  # "no": stale, another version, refused; or the server went away
    conn.send(b"g")  # from here on the run is this child's (cli/warm_server.py: the go)
    return int.from_bytes(reply[1:], sys.byteorder, signed=True)


def peer(conn: _socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end of the connected Unix socket ``conn``, as the
    kernel gives them (SO_PEERCRED: a ``struct ucred`` of three ints, pid, uid, gid)."""
    import _socket

    ucred = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(ucred[0:4], sys.byteorder, signed=True), int.from_bytes(ucred[4:8], sys.byteorder)


def _settings(stream: object) -> tuple[str, str]:
    """A standard stream's encoding and errors, as this Python made them at its start."""
    return (getattr(stream, "encoding", None) or "utf-8", getattr(stream, "errors", None) or "strict")


def package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _wait(conn: _socket.socket, child: int) -> NoReturn:
    """The child runs; pass it our signals and take its status as ours."""

    def forward(sig: int, frame: object) -> None:
        try:
            os.kill(child, sig)
        except OSError:
            pass  # it has just ended: its status is on its way

    def stop(sig: int, frame: object) -> None:
        # Ctrl-Z: the run stops, then we do, as the shell expects; at fg (or bg) both go on.  If we
        # do not stop (a group no shell controls ignores it), the run goes on at once.
        forward(_signal.SIGSTOP, frame)
        _signal.signal(_signal.SIGTSTP, _signal.SIG_DFL)
        os.kill(os.getpid(), _signal.SIGTSTP)
        _signal.signal(_signal.SIGTSTP, stop)
        forward(_signal.SIGCONT, frame)

    for sig in FORWARDED:
        if _signal.getsignal(sig) != _signal.SIG_IGN:  # (nohup: the run ignores it, as ours would)
            _signal.signal(sig, forward)
    if _signal.getsignal(_signal.SIGTSTP) != _signal.SIG_IGN:
        _signal.signal(_signal.SIGTSTP, stop)
    conn.settimeout(None)  # as long as the run: the server answers when the child has ended
    try:
        status = conn.recv(64)
    except OSError:
        status = b""
    if status[:1] == b"x" and len(status) == 5:
        os._exit(int.from_bytes(status[1:], sys.byteorder, signed=True) & 0xFF)
    if status[:1] == b"s" and len(status) == 5:
        died_of = int.from_bytes(status[1:], sys.byteorder, signed=True)
        try:
            _signal.signal(died_of, _signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL: no handler to reset (and none needed); a number that is no signal
        os.kill(os.getpid(), died_of)  # the run died of it: so do we, as its caller expects
        os._exit(128 + died_of)
    os.write(2, b"orchestrate: the warm server went away during the run\n")
    os._exit(1)
