"""The ``orchestrate`` command an installer writes (pip's or uv's console script: a few lines that
import ``orchestrate.cli.early``'s main and call it) forks its supervisor, as ``python -m
orchestrate`` does.  Its ``__main__`` is that script, a file neither of the standard library nor
ours: prestart.py's check for modules of the site (which may have registered a fork hook) counted
it as one, so the command people type always spawned a ``python -I -S`` supervisor (~13 ms before
the agent could start), and only ``-m`` and ``-c`` forked.

Seen from the agent: its parent (the supervisor) is named ``orchestrate supervisor`` when it was
forked (supervisor.py's ``_rename``), ``python -I -S -c ...`` when it was spawned."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrate.process import containment, supervisor

from .helpers import FAKE_CLAUDE, ROOT, unrecorded_run

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

# Code of its own that leaves no global but modules and our main: a fork hook registered through
# an expression (a lambda), or by a function then deleted.  The supervisor must not be forked: the
# hook would run in it and, through its own fork, in the agent.
HOOK_SCRIPTS = {
    "a lambda": """#!{python}
import os, sys
os.register_at_fork(after_in_child=lambda: None)
from orchestrate.cli.early import main
sys.exit(main())
""",
    "a deleted function": """#!{python}
import os, sys
def hook():
    pass
os.register_at_fork(after_in_child=hook)
del hook
from orchestrate.cli.early import main
sys.exit(main())
""",
    "an import under another name": """#!{python}
import sys
from os import register_at_fork as exit
exit(after_in_child=sys.exit)
from orchestrate.cli.early import main
sys.exit(main())
""",
}

# uv's template (pip's is CONSOLE_SCRIPT; distlib's and installer's use re.sub): all fork.
UV_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import sys
from orchestrate.cli.early import main
if __name__ == "__main__":
    if sys.argv[0].endswith("-script.pyw"):
        sys.argv[0] = sys.argv[0][:-11]
    elif sys.argv[0].endswith(".exe"):
        sys.argv[0] = sys.argv[0][:-4]
    sys.exit(main())
"""
DISTLIB_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from orchestrate.cli.early import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
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


@pytest.mark.parametrize("script", [UV_SCRIPT, DISTLIB_SCRIPT], ids=["uv", "distlib"])
def test_the_other_installers_commands_fork_it(tmp_path: Path, script: str) -> None:
    assert supervisor_of(tmp_path, script) == supervisor.TITLE.decode()


@pytest.mark.parametrize("case", sorted(HOOK_SCRIPTS))
def test_a_script_that_registered_a_fork_hook_spawns_it(tmp_path: Path, case: str) -> None:
    """Its globals are modules and our main alone, as an installer's are: it still has code of its
    own (it is judged by the names its code uses, not by what it left behind)."""
    parent = supervisor_of(tmp_path, HOOK_SCRIPTS[case])
    assert parent.startswith(f"{sys.executable} -I -S -c "), parent


# sys.modules as a site may leave it: a lazy module whose attributes load it (importlib's
# LazyLoader: its load may fail), a module whose __file__ is no str.
ODD_MODULES = r"""
import pathlib, sys
from orchestrate.process import prestart


class Lazy(type(sys)):
    def __getattribute__(self, name):
        raise ModuleNotFoundError("loaded on first use, and missing")


odd = type(sys)("odd")
odd.__file__ = pathlib.Path("/elsewhere/odd.py")
sys.modules[sys.argv[1]] = Lazy("lazy") if sys.argv[1] == "lazy" else odd
waiting = prestart.standby()
print("none" if waiting is None else "forked" if waiting.popen.forked else "spawned")
if waiting is not None:
    waiting.discard()
"""


@pytest.mark.parametrize("case", ["lazy", "odd"])
def test_a_module_that_will_not_say_its_file_spawns_it(tmp_path: Path, case: str) -> None:
    """The early start must neither crash on it (it did: an exception out of ``standby``, which
    the early start does not catch) nor fork: it cannot tell what that module did."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", ODD_MODULES, case],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["spawned"]
