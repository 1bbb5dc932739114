from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from orchestrate.process.terminal import ManagedCommand
from orchestrate.run.workspace import OutsideWorkspaceError, Workspace


@pytest.fixture
def layout(tmp_path: Path) -> Workspace:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("s")
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "a.txt").write_text("one\ntwo\nthree\n")
    (work / "escape").symlink_to(tmp_path / "outside")
    (work / "inner").symlink_to(work / "src")
    return Workspace(work)


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "../outside/secret",
        "src/../../outside/secret",
        "escape/secret",
        "escape",
        "/",
        "src/../..",
    ],
)
def test_every_way_out_is_refused(layout: Workspace, path: str) -> None:
    with pytest.raises(OutsideWorkspaceError):
        layout.resolve(path)
    with pytest.raises(OutsideWorkspaceError):
        layout.write_text(path if path != "escape" else "escape/new", "x")


def test_inside_paths(layout: Workspace) -> None:
    assert layout.resolve("src/a.txt") == layout.root / "src" / "a.txt"
    assert (
        layout.resolve(str(layout.root / "inner" / "a.txt")) == layout.root / "src" / "a.txt"
    )  # a link inside
    assert layout.read_text("src/a.txt", line=2, limit=1) == "two\n"
    assert layout.read_text("src/a.txt", line=2) == "two\nthree\n"
    layout.write_text("new/deep/b.txt", "hé")
    assert (layout.root / "new" / "deep" / "b.txt").read_text() == "hé"


def test_a_link_as_the_last_component_is_not_followed_on_write(layout: Workspace, tmp_path: Path) -> None:
    (layout.root / "dangling").symlink_to(tmp_path / "outside" / "planted")
    with pytest.raises(OutsideWorkspaceError):
        layout.write_text("dangling", "x")
    assert not (tmp_path / "outside" / "planted").exists()


@pytest.mark.anyio
async def test_terminal_output_keeps_the_last_bytes_at_a_character_boundary(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.write('é' * 100 + 'end'); sys.stdout.flush()"
    async with anyio.create_task_group() as tg:
        command = await ManagedCommand.start(tg, [sys.executable, "-c", code], tmp_path, {}, output_limit=11)
        assert await command.wait() == (0, None)
    assert command.truncated and command.output.endswith("end") and "\ufffd" not in command.output
    assert len(command.output.encode()) <= 11
