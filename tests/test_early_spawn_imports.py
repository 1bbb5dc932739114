"""What ``orchestrate run -e claude-code`` has loaded when it spawns its agent (the early start,
cli/early.py): only the executor's code and the spawn's own modules.  Everything imported before
that spawn delays the agent's start-up, one to one; ``dataclasses`` (with ``inspect``, ``ast``,
``dis`` and ``tokenize``) cost about 15 ms there, ``shutil`` (with ``bz2`` and ``lzma``) about 4.

The probe is honest: a real ``python -m orchestrate`` process, run through a wrapper that installs
an audit hook (``sys.addaudithook``) and notes ``sys.modules`` at the first ``subprocess.Popen``
event, which the interpreter raises inside the spawn itself, just before the fork.  The wrapper
imports nothing the check looks for (it writes with ``os`` alone), and the same probe with the
early start off sees the full CLI loaded at its first spawn: the check can fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import ROOT

# An agent that ends at once: the run then ends too (what it loaded after the spawn is not judged).
QUICK_AGENT = "/bin/sh -c 'exit 0' agent"
RUN = ["run", "-e", "claude-code", "--output", "jsonl", "--approvals", "deny"]
RUN += ["--base-command", QUICK_AGENT, "hello"]

# Run `orchestrate ARGS...`; at the first spawn, write its argv (NUL-separated) and the modules
# loaded (one a line) to $AT_SPAWN_OUT.
AT_SPAWN = r"""
import os, runpy, sys
out = os.environ["AT_SPAWN_OUT"]
seen = []

def hook(event, args):
    if event != "subprocess.Popen" or seen:
        return
    seen.append(True)
    argv = [os.fsdecode(a) for a in args[1]]
    text = "\0".join(argv) + "\n" + "\n".join(sorted(sys.modules)) + "\n"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, text.encode())
    os.close(fd)

sys.addaudithook(hook)
sys.argv = ["orchestrate", *sys.argv[1:]]
runpy.run_module("orchestrate", run_name="__main__", alter_sys=True)
"""

# Not loaded when the agent is spawned early: (module, why).  A package stands for its submodules.
NOT_BEFORE_THE_SPAWN = {
    "dataclasses": "imports inspect; the early path's records are process/record.py's",
    "inspect": "ast, dis, tokenize: ~12 ms",
    "ast": "through inspect",
    "shutil": "bz2, lzma: find_program has its own which",
    "pydantic": "the CLI's models load after the spawn",
    "anyio": "the event loop, likewise",
    "asyncio": "likewise",
    "click": "the CLI itself, likewise",
    "orchestrate.run": "the run, likewise",
    "orchestrate.normalizers": "likewise",
    "orchestrate.approvals": "likewise",
}


def first_spawn(tmp_path: Path, early: str) -> tuple[list[str], set[str]]:
    """The argv of the run's first spawn, and the modules loaded at that moment."""
    out = tmp_path / f"at-spawn-{early}.txt"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ORCHESTRATE_HOME": str(tmp_path / "home"),
        "ORCHESTRATE_EARLY": early,
        "AT_SPAWN_OUT": str(out),
    }
    proc = subprocess.run(
        [sys.executable, "-c", AT_SPAWN, *RUN],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert out.exists(), f"nothing spawned: {proc.stderr.decode(errors='replace')[-2000:]}"
    head, _, rest = out.read_text().partition("\n")
    return head.split("\0"), set(rest.split())


def loaded(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


def test_the_early_spawn_comes_before_dataclasses_and_the_cli(tmp_path: Path) -> None:
    argv, modules = first_spawn(tmp_path, "1")
    # The first spawn is the agent's supervisor, started by the early path with the agent's argv.
    assert any(a.endswith("supervisor.py") for a in argv), argv
    assert argv[argv.index("--") + 1 :][:2] == ["/bin/sh", "-c"], argv
    assert "orchestrate.process.prestart" in modules  # the watch fired at the early spawn
    assert "orchestrate.executors.claude_code" in modules
    found = {name: why for name, why in NOT_BEFORE_THE_SPAWN.items() if loaded(modules, name)}
    assert not found, f"loaded before the agent's spawn: {found}"


def test_the_probe_sees_a_late_spawn(tmp_path: Path) -> None:
    """Without the early start the first spawn comes after the CLI has loaded: the same probe
    finds dataclasses and pydantic then, so it can tell."""
    argv, modules = first_spawn(tmp_path, "0")
    assert any(a.endswith("supervisor.py") for a in argv), argv
    assert loaded(modules, "dataclasses") and loaded(modules, "pydantic") and loaded(modules, "click")


@pytest.mark.parametrize("command", ["/bin/sh", "sh", "./sh", "no-such-program-here", "", "."])
def test_which_matches_shutil(tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """find_program's own ``which`` (no shutil before the spawn) finds what shutil.which finds:
    executables only, not directories nor files without the execute bit, in PATH's order, an
    empty PATH entry meaning the current directory."""
    import shutil

    from orchestrate.executors.base import _which

    first, second, cwd = tmp_path / "a", tmp_path / "b", tmp_path / "cwd"
    for directory in (first, second, cwd):
        directory.mkdir()
    (first / "sh").write_text("not executable")
    (first / "no-such-program-here").mkdir()
    (second / "sh").write_text("#!/bin/sh\n")
    (second / "sh").chmod(0o755)
    (cwd / "sh").write_text("#!/bin/sh\n")
    (cwd / "sh").chmod(0o755)
    monkeypatch.chdir(cwd)
    for path in (f"{first}:{second}", f":{first}", f"{first}::{second}", f"{first}", str(second)):
        # (named absolutely: the agent is spawned in the task's directory, tests/test_attack_which.py)
        expected = shutil.which(command, path=path)
        expected = None if expected is None else os.path.abspath(expected)
        assert _which(command, path) == expected, (command, path)
