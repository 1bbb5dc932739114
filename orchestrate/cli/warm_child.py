"""A fork of ``orchestrate warm`` becoming its command's run (cli/warm_server.py's ``_become``).

The command's streams as 0, 1 and 2 in its encodings (:func:`take_streams`), no descriptor of the
server's (:func:`close_inherited`), what the C library read at the server's start read again from
the command's environment (:func:`as_at_a_start`), then ``orchestrate ARGS...`` as cli/early.py
runs it (:func:`run_command`).
"""

from __future__ import annotations

import contextlib
import io
import locale
import os
import sys
import time
from typing import Any

from ..process.tty import give

__all__ = ["as_at_a_start", "close_inherited", "run_command", "take_streams"]


def run_command(args: list[str]) -> int:
    """``orchestrate ARGS...`` as cli/early.py runs it; its exit code, as Python's own exit makes it."""
    from .early import command

    try:
        command(args, keep_code=False)
    except SystemExit as exit:
        code = exit.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
        sys.stderr.write(f"{code}\n")
        return 1
    return 0


def take_streams(
    fds: list[int], terminal: bool, streams: tuple[tuple[str, str], ...], unbuffered: bool, peer: int
) -> None:
    """The command's streams as 0, 1 and 2, its terminal (if any) given to the prompt, and Python's
    ``sys.std*`` made anew over them as the command's own were made at its start: their encoding and
    errors (PYTHONIOENCODING, the locale, UTF-8 mode), unbuffered or not (``-u``, PYTHONUNBUFFERED:
    the command's, not ours), line-buffered on a terminal; ``peer``: the command's pid."""
    high = [os.dup(fd) for fd in fds]  # above 2, so that no dup2 below overwrites one still needed
    for fd in fds:
        os.close(fd)
    for number, fd in enumerate(high[:3]):
        os.dup2(fd, number)
        os.close(fd)
    if terminal and len(high) > 3:
        # With the command's process group: its terminal is read only while that is the terminal's
        # foreground job (process/tty.py), as a read of ours from the background would be stopped.
        try:
            group: int | None = os.getpgid(peer)
        except OSError:
            group = None
        give(high[3], group)
    sys.stdin = _text(0, "r", *streams[0], unbuffered)
    sys.stdout = _text(1, "w", *streams[1], unbuffered)
    sys.stderr = _text(2, "w", *streams[2], True)


def _text(fd: int, mode: str, encoding: str, errors: str, unbuffered: bool) -> Any:
    tty = os.isatty(fd)
    binary: Any = io.open(fd, mode + "b", buffering=0 if unbuffered and mode == "w" else -1, closefd=False)  # noqa: SIM115, UP020
    return io.TextIOWrapper(
        binary,
        encoding=encoding,
        errors=errors,
        line_buffering=tty or (mode == "w" and fd == 2),
        write_through=unbuffered and mode == "w",
    )


def as_at_a_start() -> None:
    """What the C library read from the environment when the server started, read again from the
    command's, as its own start would have: the time zone (TZ: local times, e.g. the minute
    executors/acp.py looks for Gemini's session file by) and the locale's character type (Python
    sets LC_CTYPE from LC_ALL, LC_CTYPE, LANG at its start: the default encoding of open())."""
    time.tzset()
    with contextlib.suppress(locale.Error):  # a locale this machine lacks: the server's stays
        locale.setlocale(locale.LC_CTYPE, "")


def close_inherited() -> None:
    """Close what the server was started with beyond 0, 1 and 2 (a pipe its starter waits on, a
    log): a cold run has its command's descriptors, never those.  They are the inheritable ones:
    Python opens every descriptor of its own close-on-exec (ours, the command's streams, are 0, 1, 2
    now, and the terminal a close-on-exec copy)."""
    for name in os.listdir("/proc/self/fd"):  # noqa: PTH208  (names, not paths)
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # (the listing's own descriptor, closed by now)
                if os.get_inheritable(fd):
                    os.close(fd)
