"""How much CPU a process and what it started have used: read from /proc, on Linux."""

from __future__ import annotations

import os

__all__ = ["tree_cpu_seconds"]

_MAX_PROCESSES = 256
"""Processes counted at most (an agent at its start runs a handful; a fork bomb is not walked)."""
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds of ``pid`` (every thread) and of its live descendants, found
    through each thread's ``children`` list; None when ``pid`` is gone or /proc cannot say."""
    total = 0
    seen = 0
    queue = [pid]
    while queue and seen < _MAX_PROCESSES:
        current = queue.pop()
        stat = _read(f"/proc/{current}/stat")
        if stat is None:
            if current == pid:
                return None
            continue  # (a child that ended meanwhile: its time went to its parent's waited total)
        seen += 1
        fields = stat[stat.rindex(b")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        try:
            threads = os.listdir(f"/proc/{current}/task")  # noqa: PTH208 - (as _read)
        except OSError:
            continue
        for thread in threads:
            children = _read(f"/proc/{current}/task/{thread}/children")
            if children:
                queue.extend(int(child) for child in children.split())
    return total / _TICK


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:  # noqa: PTH123 - many small reads: no Path made for each
            return f.read()
    except OSError:
        return None
