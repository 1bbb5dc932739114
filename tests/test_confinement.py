"""Races against the confinement: another thread swaps a parent directory (or the file itself) for
a symlink to outside, thousands of times, while reads and writes go on.  Not one read may return
the outside secret, and not one write may land outside."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrate.run.confined import Beneath, OutsideWorkspaceError, UnsafeFileError, openat2_available

MODES = [
    pytest.param(
        True,
        id="openat2",
        marks=pytest.mark.skipif(not openat2_available(), reason="no openat2 on this system"),
    ),
    pytest.param(False, id="walk"),
]
TRIES = 3000
SECRET = b"SECRET outside the workspace\n"


# The swapper is another process, so it swaps truly in parallel with the reads (a thread would wait
# for the GIL and swap only between them).  renameat2(RENAME_EXCHANGE) swaps two names atomically:
# the path always exists, as the real thing or as a symlink to outside.
SWAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
if libc.renameat2(-100, a, -100, b, 2) != 0:
    sys.exit(3)
print("ready", flush=True)
while True:
    libc.renameat2(-100, a, -100, b, 2)
"""


@contextlib.contextmanager
def swapping(real: Path, link: Path) -> Iterator[None]:
    argv = [sys.executable, "-c", SWAPPER, str(real), str(link)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as swapper:
        try:
            assert swapper.stdout is not None
            if swapper.stdout.readline().strip() != "ready":
                pytest.skip("renameat2(RENAME_EXCHANGE) is not available here")
            yield
        finally:
            swapper.kill()


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "file.txt").write_bytes(SECRET)
    (outside / "file.txt").write_bytes(SECRET)
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "file.txt").write_bytes(b"inside\n")
    return work, outside


def _outside_snapshot(outside: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p.relative_to(outside)), p.read_bytes()) for p in outside.rglob("*") if p.is_file())


def _race(work: Path, outside: Path, what: str, use_openat2: bool) -> dict[str, int]:
    beneath = Beneath(str(work.resolve()), use_openat2=use_openat2)
    real = work / "sub" if what == "parent" else work / "sub" / "file.txt"
    target = outside / "sub" if what == "parent" else outside / "file.txt"
    link = real.with_name(real.name + ".link")
    link.symlink_to(target)
    counts = {"inside": 0, "refused": 0, "leaked": 0, "written": 0}
    before = _outside_snapshot(outside)
    with swapping(real, link):
        for i in range(TRIES):
            try:
                data = beneath.read("sub/file.txt", None, None, 1 << 20, threading.Event(), 1 << 20)
            except (OutsideWorkspaceError, UnsafeFileError, OSError):
                counts["refused"] += 1
            else:
                counts["leaked" if data == SECRET else "inside"] += 1
            if what == "file" and i % 10:
                continue  # a rename in the directory the swapper renames in waits on its lock: slow
            with contextlib.suppress(OutsideWorkspaceError, UnsafeFileError, OSError):
                # Into the swapped directory, or over the swapped file itself.
                written = f"sub/w{i % 7}.txt" if what == "parent" else "sub/file.txt"
                beneath.write(written, b"written by the agent\n", threading.Event())
                counts["written"] += 1
    assert _outside_snapshot(outside) == before, "a write landed outside the workspace"
    assert counts["leaked"] == 0, counts
    return counts


@pytest.mark.parametrize("use_openat2", MODES)
@pytest.mark.parametrize("what", ["parent", "file"])
def test_a_swap_race_never_leaks_or_writes_outside(
    tree: tuple[Path, Path], use_openat2: bool, what: str
) -> None:
    work, outside = tree
    counts = _race(work, outside, what, use_openat2)
    # The race really ran: both outcomes were seen.
    assert counts["inside"] > 0 and counts["refused"] > 0, counts
