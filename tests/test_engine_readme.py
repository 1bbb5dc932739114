"""The board example of the README runs as written, with the
fake Claude standing in for `claude` on $ORCHESTRATE_BIN_PATH."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .helpers import FAKE_CLAUDE, ROOT

MARKER = "# example: embedding the engine"


def example() -> str:
    for block in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S):
        if MARKER in block:
            return str(block)
    raise AssertionError("no board example in README.md")


def test_the_board_example_runs(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "claude"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_CLAUDE} "$@"\n')
    shim.chmod(0o755)
    code = example()
    assert len(code.strip().splitlines()) <= 25  # "in twenty lines", give or take the imports
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=os.environ
        | {
            "PYTHONPATH": str(ROOT),
            "ORCHESTRATE_BIN_PATH": str(bin_dir),
            "ORCHESTRATE_HOME": str(tmp_path / "h"),
        },
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    statuses = [line.split()[1] for line in lines[:-1]]
    assert statuses == ["queued", "running", "waiting_approval", "running", "done"], lines
    assert lines[-1].split()[:2] == ["done", "20"]  # two turns: the tool turn and the follow-up
