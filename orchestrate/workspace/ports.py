"""A block of ports per workspace, so dev servers of tasks running side by side do not collide.

Blocks are handed out under a lock on the workspaces' root, each clear of every block a recorded
workspace holds and of ports something already listens on, and kept in the workspace's record until
it is removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from .model import INFO_FILE, WorkspaceError, read_info

__all__ = ["FIRST_PORT", "LAST_PORT", "allocation_lock", "free_block"]

FIRST_PORT = 20000
LAST_PORT = 60999


@contextlib.contextmanager
def allocation_lock(root: Path) -> Iterator[None]:
    """Held while a block is chosen and recorded (one process at a time per root)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".ports.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for milliseconds by whoever has it
        yield
    finally:
        os.close(fd)


def taken_blocks(root: Path) -> list[tuple[int, int]]:
    blocks = []
    for record in root.glob(f"*/.meta/*/{INFO_FILE}"):
        with contextlib.suppress(WorkspaceError):
            ports = read_info(record.parent).ports
            if ports is not None:
                blocks.append(ports)
    return blocks


def free_block(root: Path, count: int) -> tuple[int, int]:
    """The lowest block of ``count`` ports clear of every recorded block and of listening ports.
    Call it under :func:`allocation_lock`, and record the block before letting go of the lock."""
    taken = taken_blocks(root)
    first = FIRST_PORT
    while first + count - 1 <= LAST_PORT:
        clash = next(((f, n) for f, n in taken if f < first + count and first < f + n), None)
        if clash is not None:
            first = clash[0] + clash[1]
            continue
        busy = next((p for p in range(first, first + count) if not _free(p)), None)
        if busy is None:
            return first, count
        first = busy + 1
    raise WorkspaceError(f"no block of {count} free ports between {FIRST_PORT} and {LAST_PORT}")


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
