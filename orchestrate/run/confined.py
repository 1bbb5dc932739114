"""Files opened beneath a directory, with the kernel as the judge (blocking: call it from a thread).

A path is never checked and then opened: every open is itself confined.  On Linux 5.6+ a path is
opened with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`` from a descriptor of the root, so
``..``, absolute paths and symlinks that lead out fail inside the kernel, atomically with the open.
Where ``openat2`` is missing (older kernels, seccomp filters, other systems) the same rules are
applied by a walk: one component at a time, each opened with ``O_NOFOLLOW`` relative to the
descriptor of the directory before it, symlinks read and resolved by hand, ``..`` never above the
root.  Symlinks that stay inside the root are followed; an absolute one is taken as a path from the
root's own real path, so it must lead back inside.

Only regular files are read or written: a FIFO, socket or device is refused before it is opened
for reading (its type is read from an ``O_PATH`` descriptor, and the file is then opened with
``O_NONBLOCK``), so nothing here can block on a file.  A file with more than one hard link is
never read (the other link may be outside) and never written through: a write goes to a temporary
file in the verified directory, renamed over the final name, which also means a link planted at the
final name is replaced, never followed.  Missing directories are made with ``mkdirat`` from verified
descriptors, after everything that could refuse the write has been checked.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import posixpath
import secrets
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import OrchestrateError

__all__ = ["Beneath", "OutsideWorkspaceError", "UnsafeFileError", "openat2_available"]

_O_PATH: int = getattr(os, "O_PATH", 0)
_O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = (_O_PATH or os.O_RDONLY) | os.O_DIRECTORY
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
# O_PATH opens any file without side effects (a FIFO does not wait for a writer, a device's
# driver is not called), so the type can be checked first.  Without it: O_NONBLOCK, then fstat.
_PROBE_FLAGS = _O_PATH or _READ_FLAGS
_MAX_LINKS = 40  # as the kernel's own limit on symlinks in one resolution
_CHUNK = 1 << 16

_SYS_OPENAT2 = 437  # one number on every Linux architecture (the syscall tables were unified at 424)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08


class OutsideWorkspaceError(OrchestrateError):
    def __init__(self, path: str, root: str) -> None:
        self.path = path
        super().__init__(f"{path} is outside the session's workspace {root}")


class UnsafeFileError(OrchestrateError):
    """A file inside the workspace that is not read or written: not a regular file, linked
    elsewhere, too large, or replaced while it was being opened."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Openat2:
    """``openat2`` through libc's ``syscall``, probed once: None until known, then True or False."""

    def __init__(self) -> None:
        self.works: bool | None = None if sys.platform == "linux" else False
        self._libc: ctypes.CDLL | None = None

    def __call__(self, dir_fd: int, path: str, flags: int, no_links: bool = False) -> int:
        if self._libc is None:
            self._libc = ctypes.CDLL(None, use_errno=True)
            self._libc.syscall.restype = ctypes.c_long
        resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS | (_RESOLVE_NO_SYMLINKS if no_links else 0)
        how = _OpenHow(flags | _O_CLOEXEC, 0, resolve)
        fd = self._libc.syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(os.fsencode(path)),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return int(fd)

    def probe(self, dir_fd: int) -> bool:
        if self.works is None:
            try:
                os.close(self(dir_fd, ".", _DIR_FLAGS))
                self.works = True
            except OSError as exc:
                # ENOSYS: a kernel before 5.6; EPERM: a seccomp filter that does not know it.
                if exc.errno not in (errno.ENOSYS, errno.EPERM):
                    raise
                self.works = False
        return self.works


_openat2 = _Openat2()


def openat2_available() -> bool:
    """Whether this system confines with ``openat2`` (else with the per-component walk)."""
    fd = os.open("/", _DIR_FLAGS | _O_CLOEXEC)
    try:
        return _openat2.probe(fd)
    finally:
        os.close(fd)


class Beneath:
    """Opens, reads and writes paths relative to ``root`` (a real, absolute path), never outside it.

    ``use_openat2=False`` forces the walk (tests run both).  Paths given here are relative to the
    root and may hold ``..`` and symlinks; what they resolve to is the kernel's answer, not ours.
    """

    def __init__(self, root: str, *, use_openat2: bool | None = None) -> None:
        self.root = root
        self._use_openat2 = use_openat2

    # --- opening ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _root_fd(self) -> Iterator[int]:
        fd = os.open(self.root, _DIR_FLAGS | _O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)

    def open(self, root_fd: int, rel: str, flags: int, no_links: bool = False) -> int:
        """A descriptor of ``rel`` opened with ``flags``, every symlink followed only inside
        (``no_links``: none followed at all, UnsafeFileError)."""
        use = self._use_openat2
        if use is None:
            use = _openat2.probe(root_fd)
        if use:
            for _ in range(8):
                try:
                    return _openat2(root_fd, rel or ".", flags, no_links)
                except OSError as exc:
                    if no_links and exc.errno == errno.ELOOP:
                        raise _changed(rel) from exc
                    if exc.errno == errno.EAGAIN:
                        continue  # a rename raced the resolution of ".."; the kernel asks to retry
                    if exc.errno != errno.EXDEV:
                        raise
                    # Out of the root, or an absolute symlink (which RESOLVE_BENEATH refuses even
                    # when it points back inside): the walk tells the two apart.
                    break
        return self._walk(root_fd, rel, flags, no_links)

    def _walk(self, root_fd: int, rel: str, flags: int, no_links: bool = False) -> int:
        todo = list(reversed(_parts(rel)))
        stack: list[int] = []  # descriptors of the directories below the root, in order
        links = 0
        try:
            while todo:
                name = todo.pop()
                if name == "..":
                    if not stack:
                        raise OutsideWorkspaceError(rel, self.root)
                    os.close(stack.pop())
                    continue
                here = stack[-1] if stack else root_fd
                last = not todo
                target = self._step(here, name, flags if last else _DIR_FLAGS)
                if isinstance(target, int):
                    if last:
                        return target
                    stack.append(target)
                    continue
                if no_links:
                    raise _changed(rel)
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel)
                if target.startswith("/"):
                    inside = _under(target, self.root)
                    if inside is None:
                        raise OutsideWorkspaceError(rel, self.root)
                    for fd in stack:
                        os.close(fd)
                    stack.clear()
                    target = inside
                todo.extend(reversed(_parts(target)))
            # The path named a directory already on the stack ("" or "a/.."): open it as asked.
            return os.open(".", flags | _O_CLOEXEC, dir_fd=stack[-1] if stack else root_fd)
        finally:
            for fd in stack:
                os.close(fd)

    @staticmethod
    def _step(dir_fd: int, name: str, flags: int) -> int | str:
        """Open ``name`` in ``dir_fd`` without following it: its descriptor, or the symlink's text."""
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            # O_NOFOLLOW on a link: ELOOP for a file, ENOTDIR with O_DIRECTORY (EMLINK on BSDs).
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise
            try:
                return os.readlink(name, dir_fd=dir_fd)
            except OSError:
                raise exc from None
        if flags & _O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):
            os.close(fd)  # O_PATH | O_NOFOLLOW opened the link itself
            return os.readlink(name, dir_fd=dir_fd)
        return fd

    # --- reading ---------------------------------------------------------------------------------

    def read(
        self,
        rel: str,
        line: int | None,
        limit: int | None,
        max_bytes: int,
        stop: threading.Event,
        max_scan: int,
        judge: Callable[[str], str | None] | None = None,
    ) -> bytes:
        """The file's bytes, or from 1-based ``line`` at most ``limit`` lines (split at ``\\n``).
        Lines skipped are read and dropped, never held; more than ``max_bytes`` kept, or more than
        ``max_scan`` scanned, is an error.  Stops soon after ``stop`` is set.  ``judge`` is given
        the real path of the file opened (not of a path checked before): a reason refuses it."""
        with self._root_fd() as root_fd:
            fd = self._open_regular(root_fd, rel)
        if judge is not None:
            try:
                opened = self._real_path(fd, rel)
                reason = judge(opened)
            except BaseException:
                os.close(fd)
                raise
            if reason is not None:
                os.close(fd)
                raise UnsafeFileError(f"reading {rel} was refused: {reason}")
        with os.fdopen(fd, "rb", buffering=_CHUNK) as f:
            if line is None and limit is None:
                data = f.read(max_bytes + 1)
                if len(data) > max_bytes:
                    raise UnsafeFileError(f"{rel} is larger than {max_bytes} bytes")
                return data
            return _lines(f, line or 1, limit, max_bytes, max_scan, stop, rel)

    def _real_path(self, fd: int, rel: str) -> str:
        if sys.platform == "linux":
            return str(Path(f"/proc/self/fd/{fd}").readlink())
        return os.path.realpath(posixpath.join(self.root, rel))

    def _open_regular(self, root_fd: int, rel: str) -> int:
        probe = self.open(root_fd, rel, _PROBE_FLAGS)
        try:
            seen = os.fstat(probe)
            _check_readable(seen, rel)
        except BaseException:
            os.close(probe)
            raise
        if not _O_PATH:
            return probe  # opened with O_NONBLOCK already, and checked
        os.close(probe)
        # Opened again for reading: the same file, or it was swapped meanwhile (then refused; a
        # FIFO swapped in does not block, thanks to O_NONBLOCK).
        fd = self.open(root_fd, rel, _READ_FLAGS)
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino) or not stat.S_ISREG(now.st_mode):
            os.close(fd)
            raise UnsafeFileError(f"{rel} was replaced while it was being opened")
        return fd

    # --- writing ---------------------------------------------------------------------------------

    def write(self, rel: str, data: bytes, stop: threading.Event, exact: bool = False) -> str:
        """Replace (or create) the regular file at ``rel`` with ``data``; its path from the root.

        ``exact``: ``rel`` is a real path already resolved (the one a person approved), so no link
        is followed: one met now was put there since, and the write is refused (UnsafeFileError)."""
        parts = _parts(posixpath.normpath(rel or "."))
        if parts[:1] == [".."]:
            raise OutsideWorkspaceError(rel, self.root)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), rel or ".")
        with self._root_fd() as root_fd:
            dir_rel, name = "/".join(parts[:-1]), parts[-1]
            dir_fd = self._make_dirs(root_fd, parts[:-1], rel, exact)
            try:
                for _ in range(_MAX_LINKS):
                    try:
                        st: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except FileNotFoundError:
                        st = None
                    if st is None or not stat.S_ISLNK(st.st_mode):
                        _check_writable(st, rel)
                        _replace(dir_fd, name, data, None if st is None else st.st_mode, stop)
                        return posixpath.join(dir_rel, name)
                    if exact:
                        raise _changed(rel)
                    # A link at the final name: write where it leads, if that is inside.
                    dir_rel, name = self._link_target(os.readlink(name, dir_fd=dir_fd), dir_rel, rel)
                    next_fd = self.open(root_fd, dir_rel, _DIR_FLAGS)
                    os.close(dir_fd)
                    dir_fd = next_fd
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel)
            finally:
                os.close(dir_fd)

    def _link_target(self, target: str, dir_rel: str, rel: str) -> tuple[str, str]:
        if target.startswith("/"):
            inside = _under(target, self.root)
            if inside is None:
                raise OutsideWorkspaceError(rel, self.root)
            target = inside
        else:
            target = posixpath.join(dir_rel, target)
        head, name = posixpath.split(target)
        if name in ("", ".", ".."):
            raise UnsafeFileError(f"{rel} leads to a directory, not a file")
        return head, name

    def _make_dirs(self, root_fd: int, parts: list[str], rel: str, no_links: bool = False) -> int:
        """The verified descriptor of the directory ``parts`` (no ``..`` in them), made if missing.
        Each missing directory is made in the descriptor of its verified parent."""
        fd = os.dup(root_fd)
        try:
            for i, part in enumerate(parts):
                prefix = "/".join(parts[: i + 1])
                try:
                    child = self.open(root_fd, prefix, _DIR_FLAGS, no_links)
                except FileNotFoundError:
                    with contextlib.suppress(FileExistsError):  # made meanwhile: open it below
                        os.mkdir(part, 0o777, dir_fd=fd)
                    child = self.open(root_fd, prefix, _DIR_FLAGS, no_links)
                except NotADirectoryError as exc:
                    raise UnsafeFileError(f"{rel}: {prefix} is not a directory") from exc
                os.close(fd)
                fd = child
            return fd
        except BaseException:
            os.close(fd)
            raise

    # --- directories -----------------------------------------------------------------------------

    def directory(self, rel: str) -> str:
        """The real path of the directory ``rel`` (a working directory for a command)."""
        real, fd = self.open_directory(rel)
        os.close(fd)
        return real

    def open_directory(self, rel: str) -> tuple[str, int]:
        """The directory ``rel`` held open: its real path and a descriptor of it (the caller closes
        it).  While it is held, the directory is that one, whatever its name is made to lead to."""
        with self._root_fd() as root_fd:
            fd = self.open(root_fd, rel, _DIR_FLAGS)
        try:
            if sys.platform == "linux":
                return str(Path(f"/proc/self/fd/{fd}").readlink()), fd
            return os.path.realpath(posixpath.join(self.root, rel)), fd
        except BaseException:
            os.close(fd)
            raise


def _changed(rel: str) -> UnsafeFileError:
    return UnsafeFileError(f"{rel}: a link is in the way, put there after the path was approved")


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _under(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` when it is lexically at or below it, else None."""
    norm = posixpath.normpath(path)
    if norm == root:
        return ""
    prefix = root.rstrip("/") + "/"
    return norm[len(prefix) :] if norm.startswith(prefix) else None


def _check_readable(st: os.stat_result, rel: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), rel)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFileError(f"{rel} is not a regular file (a FIFO, socket or device is never read)")
    if st.st_nlink > 1:
        raise UnsafeFileError(f"{rel} has {st.st_nlink} hard links; one may be outside the workspace")


def _check_writable(st: os.stat_result | None, rel: str) -> None:
    if st is None or stat.S_ISREG(st.st_mode):
        return  # a file with other hard links is replaced, so they keep the old content
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), rel)
    raise UnsafeFileError(f"{rel} is not a regular file (a FIFO, socket or device is never written)")


def _replace(dir_fd: int, name: str, data: bytes, mode: int | None, stop: threading.Event) -> None:
    """Write a temporary file beside ``name`` and rename it over ``name``: readers see the old file
    or the new one, never half of it, and nothing at ``name`` is followed or written through."""
    tmp = f".{name[:64]}.{secrets.token_hex(6)}.orchestrate-tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC, 0o666, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view[: 1 << 20]) :]
            if mode is not None:
                os.fchmod(fd, stat.S_IMODE(mode) & 0o777)  # keep the file's permissions, not set-id bits
        finally:
            os.close(fd)
        if stop.is_set():
            raise UnsafeFileError(f"writing {name} was cancelled")
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def _lines(
    f: BinaryIO,
    start: int,
    limit: int | None,
    max_bytes: int,
    max_scan: int,
    stop: threading.Event,
    rel: str,
) -> bytes:
    readline = f.readline
    scanned = 0
    number = 1
    out = bytearray()
    taken = 0
    while limit is None or taken < limit:
        if stop.is_set():
            raise UnsafeFileError(f"reading {rel} was cancelled")
        chunk: bytes = readline(_CHUNK)
        if not chunk:
            break
        scanned += len(chunk)
        if scanned > max_scan:
            raise UnsafeFileError(f"{rel}: line {start} is not within the first {max_scan} bytes")
        if number >= start:
            out += chunk
            if len(out) > max_bytes:
                raise UnsafeFileError(f"{rel}: the lines asked for are more than {max_bytes} bytes")
        if chunk.endswith(b"\n"):
            if number >= start:
                taken += 1
            number += 1
    return bytes(out)
