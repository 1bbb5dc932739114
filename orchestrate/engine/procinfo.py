"""Naming a process so that it is never confused with a later one that reuses its pid: the pid plus
the kernel's start time for it (field 22 of /proc/PID/stat, in clock ticks since boot)."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

__all__ = ["HOST", "kill_group_if_same", "start_time"]

HOST = socket.gethostname()


def start_time(pid: int) -> str | None:
    """The start time of ``pid`` as the kernel has it, or None if there is no such process (or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; the fields after its last ")" do not.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19]


def kill_group_if_same(pid: int, started: str | None) -> bool:
    """SIGKILL the process group led by ``pid`` if ``pid`` is still the process that started at
    ``started``; True if it was killed.  A reused pid, or a process we cannot identify, is left alone."""
    if started is None or start_time(pid) != started:
        return False
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True
