"""The run's terminal: ``/dev/tty``, or the one a warm server's run was handed.

A run started by ``orchestrate warm`` (cli/warm_server.py) is a process of another session: it has
no controlling terminal, so ``/dev/tty`` does not open there, though the person who typed the
command sits at one.  The command hands its terminal over with its standard streams, and the run
asks on that one (:func:`give`; cli/view_prompt.py passes it to the approval prompt), as a cold run
would on ``/dev/tty``.

This module imports nothing but ``os``: it is read before a cold run spawns its agent.
"""

from __future__ import annotations

import os

__all__ = ["give", "given", "in_foreground", "open_terminal"]

_given: list[int] = []  # the handed-over terminal's descriptor (close-on-exec), if any
_group: list[int] = []  # the process group of the command that handed it over


def give(fd: int, group: int | None = None) -> None:
    """From now on :func:`open_terminal` opens copies of ``fd`` instead of ``/dev/tty``; ``group``:
    the process group of the command it belongs to (:func:`in_foreground`)."""
    _given[:] = [fd]
    _group[:] = [] if group is None else [group]


def in_foreground() -> bool:
    """Whether the command that handed its terminal over is the terminal's foreground job (its
    process group the terminal's): only then may its terminal be read from, as a process of the
    terminal's own session could.  True when nothing says otherwise."""
    if not _given or not _group:
        return True
    try:
        return os.tcgetpgrp(_given[0]) == _group[0]
    except OSError:  # not a terminal after all, or hung up: the read will say so
        return True


def given() -> int | None:
    """The handed-over terminal's descriptor, if this run was given one."""
    return _given[0] if _given else None


def open_terminal() -> int:
    """A new descriptor of the run's terminal, read and write, close-on-exec; OSError if none."""
    if _given:
        return os.dup(_given[0])  # non-inheritable, as O_CLOEXEC
    return os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
