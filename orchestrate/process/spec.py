"""What to run: a plain record, importable before any event loop (the CLI's early start builds one
before anyio and pydantic are loaded: cli/early.py), and without :mod:`dataclasses` (record.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .record import Record

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["ProcessSpec"]


class ProcessSpec(Record):
    """What to run: argv, working directory, full environment."""

    __slots__ = ("argv", "cwd", "env")
    argv: list[str]
    cwd: Path
    env: dict[str, str]

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env = env
