"""The agent's file access, confined to the session's workspace, off the event loop.

The confinement itself is :mod:`.confined` (the kernel resolves every path beneath the workspace).
This module turns the agent's paths into paths from the workspace root, bounds what is read and
written, and runs each access in a worker thread, so a slow disk never stalls the run and a
cancelled session stops waiting at once (the thread, told to stop, ends at its next chunk).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import anyio

from ..errors import OrchestrateError
from .confined import Beneath, OutsideWorkspaceError, UnsafeFileError

__all__ = [
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "InvalidRangeError",
    "OutsideWorkspaceError",
    "UnsafeFileError",
    "Workspace",
]

MAX_READ_BYTES = 16 * 1024 * 1024
MAX_WRITE_BYTES = 16 * 1024 * 1024
MAX_SCAN_BYTES = 256 * 1024 * 1024
"""How far into a file a read from a given line may look for that line."""
MAX_LINE = 2**32 - 1  # ACP types line and limit as uint32
FILE_THREADS = 4
"""File accesses at once per session: what they hold in memory is at most this many reads' worth."""

T = TypeVar("T")


class InvalidRangeError(OrchestrateError):
    """A read's ``line`` or ``limit`` out of range."""


class Workspace:
    def __init__(self, root: Path, *, use_openat2: bool | None = None) -> None:
        self.root = Path(os.path.realpath(root))
        self._beneath = Beneath(str(self.root), use_openat2=use_openat2)
        self._limiter: anyio.CapacityLimiter | None = None

    def relative(self, path: str) -> str:
        """``path`` from the root: a relative path is taken from the root; an absolute one must be
        lexically under it.  Symlinks and ``..`` are left for the kernel to resolve, beneath."""
        if not posixpath.isabs(path):
            return path
        norm = posixpath.normpath(path)
        root = str(self.root)
        if norm == root:
            return ""
        if not norm.startswith(root.rstrip("/") + "/"):
            raise OutsideWorkspaceError(path, root)
        return norm[len(root.rstrip("/")) + 1 :]

    def resolve(self, path: str) -> Path:
        """The real path of ``path``, or OutsideWorkspaceError when it leads out by any route.

        For judging and showing a path (policy rules match the real target), never for opening:
        what is opened is resolved again by the kernel, beneath the root, at the moment it is opened.
        """
        real = Path(os.path.realpath(self.root / self.relative(path)))
        if real != self.root and self.root not in real.parents:
            raise OutsideWorkspaceError(path, str(self.root))
        return real

    async def read_text(
        self,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        max_bytes: int | None = None,
        judge: Callable[[str], str | None] | None = None,
    ) -> str:
        """The file's text (invalid UTF-8 replaced), from 1-based ``line``, at most ``limit`` lines,
        at most ``max_bytes`` (MAX_READ_BYTES by default) or UnsafeFileError; ``judge``: a reason to
        refuse the real path of the file opened, or None (see Beneath.read)."""
        if line is not None and not 1 <= line <= MAX_LINE:
            raise InvalidRangeError(f"line must be from 1 to {MAX_LINE}, not {line}")
        if limit is not None and not 0 <= limit <= MAX_LINE:
            raise InvalidRangeError(f"limit must be from 0 to {MAX_LINE}, not {limit}")
        rel = self.relative(path)
        most = MAX_READ_BYTES if max_bytes is None else min(max_bytes, MAX_READ_BYTES)
        data = await self._in_thread(
            lambda stop: self._beneath.read(rel, line, limit, most, stop, MAX_SCAN_BYTES, judge)
        )
        return data.decode("utf-8", "replace")

    async def write_text(self, path: str, content: str, exact: bool = False) -> Path:
        """Replace or create the file (directories made as needed); its path.  ``exact``: ``path``
        is the real path that was approved; a link found on it now refuses the write."""
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate, which JSON can carry
            raise UnsafeFileError(f"{path}: the content is not valid Unicode ({exc.reason})") from exc
        if len(data) > MAX_WRITE_BYTES:
            raise UnsafeFileError(f"{path}: {len(data)} bytes, more than a write holds ({MAX_WRITE_BYTES})")
        rel = self.relative(path)
        written = await self._in_thread(lambda stop: self._beneath.write(rel, data, stop, exact))
        return self.root / written

    async def directory(self, path: str) -> Path:
        """The real path of a directory inside the workspace (a command's working directory)."""
        rel = self.relative(path)
        real = Path(await self._in_thread(lambda stop: self._beneath.directory(rel)))
        if real != self.root and self.root not in real.parents:  # moved out since it was opened
            raise OutsideWorkspaceError(path, str(self.root))
        return real

    @contextlib.asynccontextmanager
    async def held_directory(self, path: str) -> AsyncIterator[tuple[Path, Path]]:
        """A directory inside the workspace, held open while the context lasts: its real path (to
        show), and the path to start a process in.  On Linux that is the held directory itself
        (``/proc/self/fd/N``, which a child resolves to the same open directory before it execs),
        so a name swapped for a link while a person was asked cannot move the command out."""
        rel = self.relative(path)
        real_text, fd = await self._in_thread(lambda stop: self._beneath.open_directory(rel))
        try:
            real = Path(real_text)
            if real != self.root and self.root not in real.parents:  # moved out since it was opened
                raise OutsideWorkspaceError(path, str(self.root))
            yield real, Path(f"/proc/self/fd/{fd}") if sys.platform == "linux" else real
        finally:
            os.close(fd)

    async def _in_thread(self, work: Callable[[threading.Event], T]) -> T:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(FILE_THREADS)
        stop = threading.Event()
        try:
            return await anyio.to_thread.run_sync(work, stop, abandon_on_cancel=True, limiter=self._limiter)
        finally:
            stop.set()  # a thread left behind by a cancel ends at its next chunk
