"""A command's request to ``orchestrate warm``, and whether the server may serve it.

What cli/warm.py's ``_start`` sends, parsed and checked field by field (:func:`parse_request`);
whether a fork of the server can take the command's nice value and limits (:func:`can_become`,
:func:`take_limits`), lives in its namespaces and root (:func:`in_our_namespaces`), and can be
moved into the command's cgroup (:func:`into_cgroup_of`).  Anything else: the command runs cold.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

from ..process import containment
from .warm import PROTOCOL, package_dir

__all__ = [
    "MAX_FDS",
    "MAX_REQUEST",
    "Request",
    "can_become",
    "in_our_namespaces",
    "into_cgroup_of",
    "limited",
    "parse_request",
    "take_limits",
]


MAX_REQUEST = 1 << 20  # arguments and environment; a bigger one is refused (the command goes cold)


MAX_FDS = 4  # stdin, stdout, stderr, and the terminal if there is one


_NAMESPACES = ("mnt", "pid", "net", "user", "ipc", "uts", "cgroup", "time")  # the command's must be ours


@dataclass(eq=False)
class Request:
    args: list[str]
    cwd: str
    env: dict[str, str]
    umask: int
    fds: list[int]  # ours now: closed by the server once the child has its copies
    terminal: bool
    peer: int  # the command's pid (SO_PEERCRED)
    nice: int
    limits: dict[int, tuple[int, int]]
    unbuffered: bool  # python -u, PYTHONUNBUFFERED: the command's stdout writes through
    streams: tuple[tuple[str, str], ...]  # the command's sys.stdin, stdout, stderr: encoding, errors


def parse_request(request: object, fds: list[int], peer: int = 0) -> Request | None:
    """The command's request (cli/warm.py's ``_start``), if it is well formed and of our installation."""
    if not isinstance(request, tuple) or len(request) != 12:
        return None
    protocol, exe, package, version, args, cwd, env, umask, terminal, nice, limits, streams = request
    if (protocol, exe, package, version) != (PROTOCOL, sys.executable, package_dir(), sys.version):
        return None
    if not (
        isinstance(args, list)
        and all(isinstance(a, str) for a in args)
        and isinstance(cwd, str)
        and isinstance(env, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        and isinstance(umask, int)
        and 0 <= umask <= 0o777
        and isinstance(terminal, bool)
        and len(fds) == 3 + terminal
        and isinstance(nice, int)
        and -20 <= nice <= 19
        and isinstance(limits, dict)
        and all(_is_limit(number, value) for number, value in limits.items())
        and _are_streams(streams)
    ):
        return None
    unbuffered, settings = streams
    return Request(args, cwd, env, umask, fds, terminal, peer, nice, limits, unbuffered, settings)


def _are_streams(streams: object) -> bool:
    """(unbuffered, ((encoding, errors) of stdin, stdout, stderr)), each a codec and an error
    handler Python knows (a LookupError in the child would only say so on the command's stderr)."""
    if not (isinstance(streams, tuple) and len(streams) == 2 and isinstance(streams[0], bool)):
        return False
    settings = streams[1]
    if not (isinstance(settings, tuple) and len(settings) == 3):
        return False
    for setting in settings:
        if not (
            isinstance(setting, tuple) and len(setting) == 2 and all(isinstance(v, str) for v in setting)
        ):
            return False
        try:
            codecs.lookup(setting[0])
            codecs.lookup_error(setting[1])
        except LookupError:
            return False
    return True


def _is_limit(number: object, value: object) -> bool:
    return (
        isinstance(number, int)
        and 0 <= number < 64
        and isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, int) and v >= -1 for v in value)
    )


def can_become(request: Request) -> bool:
    """Whether a child of ours can take the command's nice value and resource limits: lowering is
    always allowed, raising only to root (else the command runs cold, with its own)."""
    if os.geteuid() == 0:
        return True
    if request.nice < os.getpriority(os.PRIO_PROCESS, 0):
        return False
    return all(
        not _above(hard, resource.getrlimit(number)[1]) for number, (_, hard) in request.limits.items()
    )


def _above(limit: int, than: int) -> bool:
    infinity = resource.RLIM_INFINITY
    return limit != than and (limit == infinity or (than != infinity and limit > than))


def take_limits(request: Request) -> None:
    """The command's nice value and resource limits, as its own process had them."""
    os.setpriority(os.PRIO_PROCESS, 0, request.nice)
    for number, (soft, hard) in request.limits.items():
        with contextlib.suppress(ValueError):  # a limit this kernel does not know
            resource.setrlimit(number, (soft, hard))


def in_our_namespaces(command: int) -> bool:
    """Whether the command lives where we do: our namespaces (mount: its paths name our files; pid:
    the pid we answer is the run's for it too; network, user, ...) and our root (no chroot).  A
    container that shares the socket's directory with us, with our uid and paths, runs cold, in it:
    its run forked here would run outside it."""
    if not _OURS:
        _OURS.update(_where(os.getpid()))
    return _where(command, _OURS) == _OURS


_OURS: dict[str, tuple[int, int]] = {}  # our namespaces and root, as _where gives them (found once)


def _where(pid: int, kinds: dict[str, tuple[int, int]] | None = None) -> dict[str, tuple[int, int]]:
    """Process ``pid``'s namespaces (those of ``kinds``, else every one this kernel has) and root,
    each by its device and inode; a kind it has no file for is left out."""
    found = {}
    for name in [*(f"ns/{kind}" for kind in _NAMESPACES), "root"] if kinds is None else kinds:
        try:
            info = os.stat(f"/proc/{pid}/{name}")  # noqa: PTH116  (os.stat: a third of pathlib's time)
        except OSError:
            continue
        found[name] = (info.st_dev, info.st_ino)
    return found


def into_cgroup_of(command: int, child: int) -> bool:
    """Whether ``child`` is in ``command``'s cgroups now, as a cold run would be, or loses nothing
    by not being there: the same as ours; or moved into its cgroup v2 (before it runs anything: it
    waits for its go); or, the move refused (a session's scope, root's), a group that, up to the one
    it shares with ours, sets no limit (:func:`limited`: then only accounting differs).  Else, or
    in a v1 hierarchy's group other than ours, it runs cold: the run and its agent would escape the
    limits the command was put under (``systemd-run --scope -p MemoryMax=...``, a CI job's)."""
    try:
        theirs = Path(f"/proc/{command}/cgroup").read_text().splitlines()
        ours = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return False
    if theirs == ours:
        return True
    if [line for line in theirs if not line.startswith("0::")] != [
        line for line in ours if not line.startswith("0::")
    ]:
        return False
    directory = containment._find_our_cgroup(str(command))
    if directory is None:
        return False
    try:
        Path(directory, "cgroup.procs").write_text(str(child))
    except OSError:
        own = containment._find_our_cgroup()
        return own is not None and not limited(directory, os.path.commonpath([directory, own]))
    return True


def limited(directory: str, common: str) -> bool:
    """Whether a cgroup from ``directory`` up to ``common`` (not included) sets a limit."""
    while directory != common and directory.startswith(common + "/"):
        for name, unlimited in _UNLIMITED.items():
            try:
                value = Path(directory, name).read_text().strip()
            except OSError:
                continue
            if value.split(" ")[0] != unlimited and value != unlimited:
                return True
        directory = os.path.dirname(directory)  # noqa: PTH120
    return False


# What a cgroup v2 limits, with the value that limits nothing (absent: the controller is not on).
_UNLIMITED = {
    "memory.max": "max",
    "memory.high": "max",
    "memory.swap.max": "max",
    "pids.max": "max",
    "cpu.max": "max",  # (then the period: "max 100000")
    "io.max": "",
}
