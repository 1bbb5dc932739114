"""Shared helpers for the tests: paths, the fake CLI, and process-survival checks."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.claude_code import ClaudeCodeExecutor

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
FAKE_CLAUDE = FIXTURES / "bin" / "fake_claude.py"
CLI_BIN = ROOT / "clis" / "node_modules" / ".bin"


def fake_claude(**options: object) -> ClaudeCodeExecutor:
    """The Claude Code executor, pointed at the fake CLI script."""
    return ClaudeCodeExecutor(ExecutorOptions(base_command=[sys.executable, str(FAKE_CLAUDE)], **options))  # type: ignore[arg-type]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def real_cli_available(program: str) -> bool:
    return (CLI_BIN / program).exists()
