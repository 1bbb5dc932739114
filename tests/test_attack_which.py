"""Attacks on executors/base.py's own ``_which`` (it replaced shutil.which for the early start).

The program found is spawned with the task's directory as its working directory, so a path that
is not absolute would be looked up again there: in the workspace the agent writes to.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orchestrate.executors.base import _which, find_program


def _program(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("entry", ["bin", "./bin", ""])
def test_relative_path_entry_gives_an_absolute_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    # PATH with a relative (or empty, meaning the current directory) entry: the program found must
    # be named absolutely, or the spawn (cwd = the task's directory) runs whatever the workspace
    # holds under that relative name.
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    target = _program(home / "bin" / "agentx") if entry else _program(home / "agentx")
    monkeypatch.chdir(home)
    found = _which("agentx", entry)
    assert found is not None
    assert os.path.isabs(found)
    assert Path(found).samefile(target)


def test_program_with_a_relative_directory_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _program(tmp_path / "agentx")
    monkeypatch.chdir(tmp_path)
    found = _which("./agentx", "/nonexistent")
    assert found == str(tmp_path / "agentx")


def test_find_program_relative_entry_not_resolved_in_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    _program(home / "bin" / "agentx")
    monkeypatch.chdir(home)
    monkeypatch.setenv("ORCHESTRATE_BIN_PATH", "bin")
    found = find_program("agentx")
    assert found == str(home / "bin" / "agentx")


def test_skips_directory_non_executable_and_symlink_loop(tmp_path: Path) -> None:
    loop, directory, plain, good = (tmp_path / name for name in ("loop", "dir", "plain", "good"))
    for d in (loop, directory, plain, good):
        d.mkdir()
    (loop / "agentx").symlink_to(loop / "agentx")  # ELOOP
    (directory / "agentx").mkdir()
    (directory / "agentx").chmod(0o755)
    (plain / "agentx").write_text("not a program\n")
    target = _program(good / "agentx")
    path = os.pathsep.join(str(d) for d in (loop, directory, plain, good))
    assert _which("agentx", path) == str(target)
    assert _which("agentx", os.pathsep.join(str(d) for d in (loop, directory, plain))) is None
