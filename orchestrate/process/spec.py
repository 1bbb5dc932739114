"""What to run: a plain record, importable before any event loop (the CLI's early start builds one
before anyio and pydantic are loaded: cli/early.py), and without :mod:`dataclasses` (record.py)."""

from __future__ import annotations

import os

from .record import Record

# Neither typing nor pathlib at run time: the early start builds and spawns a spec before either is
# loaded (pathlib brings re, fnmatch, urllib.parse and ipaddress: ~5 ms of every start without the
# editable install's finder, which loads them anyway).  mypy takes any TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["ProcessSpec"]


class ProcessSpec(Record):
    """What to run: argv, working directory, full environment.

    ``cwd`` is a :class:`~pathlib.Path` to every reader, as it always was, made when it is read;
    the spec holds the directory as a str, ``directory``, which is what a spawn passes (the early
    start's spawn reads that, and so never loads pathlib).  Either form may be given: two specs are
    equal when their paths are, whichever form each was made from."""

    __slots__ = ("argv", "directory", "env")
    argv: list[str]
    directory: str
    """The working directory as given, as a str (``os.fspath``): what the spawn passes."""
    env: dict[str, str]

    def __init__(self, argv: list[str], cwd: str | os.PathLike[str], env: dict[str, str]) -> None:
        self.argv = argv
        self.directory = os.fspath(cwd)
        self.env = env

    @property
    def cwd(self) -> Path:
        """The working directory as a Path."""
        from pathlib import Path

        return Path(self.directory)

    def _fields(self) -> tuple[str, ...]:
        # The record's fields are its constructor's (``cwd``, a Path): equality, repr, replace and
        # pickle go through them, so they compare paths as before, not the strings they came from.
        return ("argv", "cwd", "env")
