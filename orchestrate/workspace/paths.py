"""Paths the workspace layer writes: always beneath a root it was given, never through a symlink.

Copying the repository's ignored files into a new worktree writes where the agent has not been yet,
but the checked-out tree itself may hold symlinks (a committed ``config -> /etc``): every directory on
the way is checked to be a real directory beneath the root, and the file is created with
``O_NOFOLLOW | O_EXCL``.  Removal deletes only what lies beneath the root it names, without following
a symlink out of it (:func:`shutil.rmtree` works by file descriptors on Linux).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import posixpath
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from .model import WorkspaceError

__all__ = ["OutsideRootError", "copy_into", "inside", "matches", "remove_tree", "safe_relative"]


class OutsideRootError(WorkspaceError):
    """A path that would lead out of the root it must stay beneath."""

    code = "outside_workspace"


def safe_relative(path: str) -> str:
    """``path`` as a clean relative POSIX path, or OutsideRootError (absolute, ``..``, empty)."""
    norm = posixpath.normpath(path)
    if not path or posixpath.isabs(path) or norm == ".." or norm.startswith("../") or norm == ".":
        raise OutsideRootError(f"{path!r} is not a path inside the workspace")
    if "\0" in path:
        raise OutsideRootError(f"{path!r} holds a NUL byte")
    return norm


def inside(root: Path, path: Path) -> bool:
    """Whether ``path`` resolves (symlinks followed) to ``root`` or beneath it."""
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(path))
    return real == real_root or real_root in real.parents


def matches(rel: str, globs: Iterable[str]) -> bool:
    """A glob without ``/`` matches the last name at any depth (as in .gitignore); one with ``/``
    matches the whole path from the root."""
    rel = rel.rstrip("/")
    name = rel.rsplit("/", 1)[-1]
    for glob in globs:
        g = glob.strip("/")
        if not g:
            continue
        if "/" in g:
            if fnmatch.fnmatchcase(rel, g):
                return True
        elif fnmatch.fnmatchcase(name, g):
            return True
    return False


def _real_dirs(root: Path, rel_dir: str) -> Path:
    """Make (or check) each directory of ``rel_dir`` beneath ``root``; a symlink or a file on the
    way is refused."""
    here = root
    for part in [p for p in rel_dir.split("/") if p]:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            here.mkdir(0o755)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise OutsideRootError(
                f"{here} is not a plain directory (a symlink?); nothing is copied through it"
            )
    return here


def copy_into(source_root: Path, rel: str, dest_root: Path) -> list[str]:
    """Copy ``source_root/rel`` (a file, a symlink, or a directory, recursively; symlinks copied as
    links, never followed) to ``dest_root/rel``.  Returns the relative paths copied; what is already
    there is left as it is."""
    rel = safe_relative(rel.rstrip("/"))
    src = source_root / rel
    st = os.lstat(src)
    parent, _, name = rel.rpartition("/")
    dest_dir = _real_dirs(dest_root, parent)
    dest = dest_dir / name
    if os.path.lexists(dest):
        return []
    if stat.S_ISLNK(st.st_mode):
        dest.symlink_to(src.readlink())
        return [rel]
    if stat.S_ISREG(st.st_mode):
        _copy_file(src, dest, st.st_mode)
        return [rel]
    if stat.S_ISDIR(st.st_mode):
        dest.mkdir(0o755)
        copied = []
        for child in sorted(src.iterdir()):
            copied += copy_into(source_root, f"{rel}/{child.name}", dest_root)
        return copied
    return []  # a socket, a FIFO, a device: not a file to copy


def _copy_file(src: Path, dest: Path, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(dest, flags, stat.S_IMODE(mode) | 0o600)
    with os.fdopen(fd, "wb") as out, open(src, "rb") as given:  # noqa: PTH123 (a file descriptor, opened safely)
        shutil.copyfileobj(given, out, 1024 * 1024)


def remove_tree(root: Path, path: Path) -> None:
    """Remove ``path`` (a directory beneath ``root``, not ``root`` itself) and all it holds; a
    symlink inside is removed, never followed.  A path not beneath ``root`` is refused."""
    real_root = Path(os.path.realpath(root))
    parent = Path(os.path.realpath(path.parent))
    target = parent / path.name
    if target == real_root or not (parent == real_root or real_root in parent.parents):
        raise OutsideRootError(f"{path} is not beneath {root}; it is not removed")
    if target.is_symlink():
        target.unlink()
        return
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(target)
