"""What to run: a plain record, importable before any event loop (the CLI's early start builds one
before anyio and pydantic are loaded: cli/early.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessSpec"]


@dataclass(frozen=True)
class ProcessSpec:
    """What to run: argv, working directory, full environment."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
