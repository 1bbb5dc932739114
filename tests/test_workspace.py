"""The agent's file access: every way out refused, by openat2 and by the walk alike, with real files."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import anyio
import pytest

from orchestrate.run.confined import openat2_available
from orchestrate.run.workspace import (
    InvalidRangeError,
    OutsideWorkspaceError,
    UnsafeFileError,
    Workspace,
)

pytestmark = pytest.mark.anyio

MODES = [
    pytest.param(
        True,
        id="openat2",
        marks=pytest.mark.skipif(not openat2_available(), reason="no openat2 on this system"),
    ),
    pytest.param(False, id="walk"),
]


@pytest.fixture(params=MODES)
def layout(tmp_path: Path, request: pytest.FixtureRequest) -> Workspace:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("s")
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "a.txt").write_text("one\ntwo\nthree\n")
    (work / "escape").symlink_to(tmp_path / "outside")
    (work / "inner").symlink_to(work / "src")  # absolute, but inside
    (work / "rel").symlink_to("src/../src")  # relative, inside
    return Workspace(work, use_openat2=request.param)


def outside_state(tmp_path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (tmp_path / "outside").iterdir()}


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "../outside/secret",
        "src/../../outside/secret",
        "escape/secret",
        "rel/../../outside/secret",
        "inner/../../outside/secret",
    ],
)
async def test_every_way_out_is_refused(layout: Workspace, tmp_path: Path, path: str) -> None:
    before = outside_state(tmp_path)
    with pytest.raises(OutsideWorkspaceError):
        await layout.read_text(path)
    with pytest.raises(OutsideWorkspaceError):
        await layout.write_text(path, "x")
    with pytest.raises(OutsideWorkspaceError):
        await layout.write_text(path + "-new", "x")
    assert outside_state(tmp_path) == before
    assert sorted(p.name for p in layout.root.iterdir()) == ["escape", "inner", "rel", "src"]


async def test_judging_paths_resolves_links(layout: Workspace) -> None:
    assert layout.resolve("src/a.txt") == layout.root / "src" / "a.txt"
    assert layout.resolve(str(layout.root / "inner" / "a.txt")) == layout.root / "src" / "a.txt"
    for path in ("escape", "/", "src/../..", "/etc/passwd"):
        with pytest.raises(OutsideWorkspaceError):
            layout.resolve(path)


async def test_inside_paths_and_links_that_stay_inside(layout: Workspace) -> None:
    assert await layout.read_text("src/a.txt", line=2, limit=1) == "two\n"
    assert await layout.read_text("src/a.txt", line=2) == "two\nthree\n"
    assert await layout.read_text("src/a.txt", line=9) == ""
    assert await layout.read_text("src/a.txt", limit=0) == ""
    assert await layout.read_text(str(layout.root / "inner" / "a.txt")) == "one\ntwo\nthree\n"
    assert await layout.read_text("rel/a.txt", limit=1) == "one\n"
    await layout.write_text("new/deep/b.txt", "hé")
    assert (layout.root / "new" / "deep" / "b.txt").read_text() == "hé"
    await layout.write_text("inner/c.txt", "through an absolute link inside")
    assert (layout.root / "src" / "c.txt").read_text() == "through an absolute link inside"


@pytest.mark.parametrize(("line", "limit"), [(0, None), (-1, None), (None, -1), (2**32, None), (1, 10**12)])
async def test_line_and_limit_out_of_range(layout: Workspace, line: int | None, limit: int | None) -> None:
    with pytest.raises(InvalidRangeError):
        await layout.read_text("src/a.txt", line=line, limit=limit)


async def test_a_link_as_the_last_component(layout: Workspace, tmp_path: Path) -> None:
    (layout.root / "dangling").symlink_to(tmp_path / "outside" / "planted")
    with pytest.raises(OutsideWorkspaceError):
        await layout.write_text("dangling", "x")
    assert not (tmp_path / "outside" / "planted").exists()
    (layout.root / "to-a").symlink_to("src/a.txt")
    await layout.write_text("to-a", "via the link\n")  # an inside link is written through to its target
    assert (layout.root / "to-a").is_symlink()
    assert (layout.root / "src" / "a.txt").read_text() == "via the link\n"


async def test_a_fifo_is_refused_at_once(layout: Workspace) -> None:
    os.mkfifo(layout.root / "fifo")
    with anyio.fail_after(5):  # a blocking open would hang here, with no writer ever coming
        with pytest.raises(UnsafeFileError, match="not a regular file"):
            await layout.read_text("fifo")
        with pytest.raises(UnsafeFileError, match="not a regular file"):
            await layout.read_text("fifo", line=1, limit=1)
        with pytest.raises(UnsafeFileError, match="not a regular file"):
            await layout.write_text("fifo", "x")
    assert sorted(p.name for p in layout.root.iterdir()) == ["escape", "fifo", "inner", "rel", "src"]


async def test_a_hardlink_to_a_file_outside(layout: Workspace, tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret"
    os.link(secret, layout.root / "hard")
    with pytest.raises(UnsafeFileError, match="hard links"):
        await layout.read_text("hard")
    await layout.write_text("hard", "new content")
    assert secret.read_text() == "s"  # replaced inside, never written through
    assert (layout.root / "hard").read_text() == "new content"
    assert secret.stat().st_nlink == 1


async def test_a_write_keeps_the_mode_and_leaves_no_temporary_file(layout: Workspace) -> None:
    script = layout.root / "run.sh"
    script.write_text("old")
    script.chmod(0o750)
    await layout.write_text("run.sh", "#!/bin/sh\n")
    assert script.stat().st_mode & 0o777 == 0o750 and script.read_text() == "#!/bin/sh\n"
    assert sorted(p.name for p in layout.root.iterdir()) == ["escape", "inner", "rel", "run.sh", "src"]


async def test_refused_writes_create_nothing(layout: Workspace) -> None:
    (layout.root / "file").write_text("f")
    for path in ("file/new/x.txt", "src", "src/a.txt/x", "escape/new/x.txt", "../new/x.txt"):
        with pytest.raises((OutsideWorkspaceError, UnsafeFileError, OSError)):
            await layout.write_text(path, "x")
    assert sorted(p.name for p in layout.root.iterdir()) == ["escape", "file", "inner", "rel", "src"]
    assert sorted(p.name for p in (layout.root / "src").iterdir()) == ["a.txt"]


async def test_sizes_are_bounded(layout: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrate.run import workspace

    monkeypatch.setattr(workspace, "MAX_READ_BYTES", 8)
    monkeypatch.setattr(workspace, "MAX_WRITE_BYTES", 8)
    with pytest.raises(UnsafeFileError, match="larger than 8 bytes"):
        await layout.read_text("src/a.txt")
    assert await layout.read_text("src/a.txt", line=3) == "three\n"
    with pytest.raises(UnsafeFileError, match="more than 8 bytes"):
        await layout.read_text("src/a.txt", line=1, limit=3)
    with pytest.raises(UnsafeFileError, match="more than a write holds"):
        await layout.write_text("big", "123456789")
    assert not (layout.root / "big").exists()


async def test_a_cancelled_read_stops_its_thread(layout: Workspace) -> None:
    """A read scanning a long file for a far line is abandoned at once, and its thread, told to
    stop, ends within a second (the whole scan takes several)."""
    with (layout.root / "long").open("wb") as f:
        f.write(b"x\n" * 20_000_000)
    with anyio.move_on_after(0.05) as scope:
        await layout.read_text("long", line=30_000_000, limit=1)
    assert scope.cancelled_caught
    with anyio.fail_after(1):
        while any(_scanning(t) for t in threading.enumerate()):  # noqa: ASYNC110 - no event for a thread
            await anyio.sleep(0.01)


def _scanning(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == "_lines":
            return True
        frame = frame.f_back
    return False
