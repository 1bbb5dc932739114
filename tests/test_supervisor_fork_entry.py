"""The ``orchestrate`` command an installer writes (pip's or uv's console script: a few lines that
import ``orchestrate.cli.early``'s main and call it) forks its supervisor, as ``python -m
orchestrate`` does.  Its ``__main__`` is that script, a file neither of the standard library nor
ours: prestart.py's check for modules of the site (which may have registered a fork hook) counted
it as one, so the command people type always spawned a ``python -I -S`` supervisor (~13 ms before
the agent could start), and only ``-m`` and ``-c`` forked.

Seen from the agent: its parent (the supervisor) is named ``orchestrate supervisor`` when it was
forked (supervisor.py's ``_rename``), ``python -I -S -c ...`` when it was spawned."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from orchestrate.process import containment, supervisor

from .helpers import FAKE_CLAUDE, unrecorded_run

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux supervisor")

# As pip writes it (uv's differs only in how it trims argv[0]).
CONSOLE_SCRIPT = """#!{python}
import sys
from orchestrate.cli.early import main
if __name__ == '__main__':
    sys.argv[0] = sys.argv[0].removesuffix('.exe')
    sys.exit(main())
"""

# A script of its own that calls the same main: it may have done anything before (a fork hook).
OWN_SCRIPT = """#!{python}
import sys
def mine():
    pass
from orchestrate.cli.early import main
sys.exit(main())
"""

# The agent notes its parent's command line, then is the fake Claude.
AGENT = """#!/bin/sh
tr '\\0' ' ' < /proc/$PPID/cmdline > {out}
exec {fake} "$@"
"""


def supervisor_of(tmp_path: Path, script: str) -> str:
    """The command line of the agent's supervisor in a run of the ``orchestrate`` command ``script``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    command = bin_dir / "orchestrate"
    command.write_text(script.format(python=sys.executable))
    command.chmod(0o755)
    noted = tmp_path / "parent"
    fake = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLAUDE))}"
    agent = bin_dir / "agent"
    agent.write_text(AGENT.format(out=shlex.quote(str(noted)), fake=fake))
    agent.chmod(0o755)
    args = ["run", "-e", "claude-code", "--base-command", str(agent), "--cwd", str(tmp_path)]
    args += ["--approvals", "deny", "--output", "jsonl", "hi"]
    unrecorded_run([str(command), *args], tmp_path)
    return noted.read_text().strip()


@pytest.fixture(autouse=True)
def _usable() -> None:
    if not containment.supervisor_usable():
        pytest.skip("no supervisor here")


def test_the_installed_command_forks_its_supervisor(tmp_path: Path) -> None:
    assert supervisor_of(tmp_path, CONSOLE_SCRIPT) == supervisor.TITLE.decode()


def test_a_script_of_its_own_spawns_it(tmp_path: Path) -> None:
    """The control: a ``__main__`` with code of its own is judged as any module of the site."""
    parent = supervisor_of(tmp_path, OWN_SCRIPT)
    assert parent.startswith(f"{sys.executable} -I -S -c "), parent
