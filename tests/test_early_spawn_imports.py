"""What ``orchestrate run -e claude-code`` has loaded when it spawns its agent's supervisor and when
it sends it the agent's command line (the early start, cli/early.py): at the spawn, not even the
executor's code; at the send, only the executor's code and the spawn's own modules.  Everything
imported before that send delays the agent's start-up, one to one; ``dataclasses`` (with
``inspect``, ``ast``, ``dis`` and ``tokenize``) cost about 15 ms there, ``shutil`` (with ``bz2``
and ``lzma``) about 4.

The probe is honest: a real ``python -m orchestrate`` process, run through a wrapper that installs
an audit hook (``sys.addaudithook``) and notes ``sys.modules`` at the first ``os.posix_spawn`` or
``subprocess.Popen`` event, which the interpreter raises inside the spawn itself, just before the
fork.  The wrapper imports nothing the check looks for (it writes with ``os`` alone), and the same
probe with the early start off sees the full CLI loaded at its first spawn: the check can fail.
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
# loaded (one a line) to $AT_SPAWN_OUT; when the supervisor is sent what to start (the early start's
# Launch.send, wrapped at that first spawn without importing anything), the modules loaded then to
# $AT_SPAWN_OUT.send.
AT_SPAWN = r"""
import os, runpy, sys
out = os.environ["AT_SPAWN_OUT"]
seen = []

def note(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, text.encode())
    os.close(fd)

def hook(event, args):
    if event not in ("subprocess.Popen", "os.posix_spawn") or seen:
        return
    seen.append(True)
    argv = [os.fsdecode(a) for a in args[1]]
    note(out, "\0".join(argv) + "\n" + "\n".join(sorted(sys.modules)) + "\n")
    containment = sys.modules.get("orchestrate.process.containment")
    if containment is not None:
        send = containment.Launch.send
        def noted(self):
            note(out + ".send", "\n".join(sorted(sys.modules)) + "\n")
            return send(self)
        containment.Launch.send = noted

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


def at_send(tmp_path: Path) -> set[str]:
    """The modules loaded when the early start sent its supervisor the agent's command line."""
    sent = tmp_path / "at-spawn-1.txt.send"
    assert sent.exists(), "the early start sent nothing to its supervisor"
    return set(sent.read_text().split())


def loaded(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


def test_the_early_spawn_comes_before_dataclasses_and_the_cli(tmp_path: Path) -> None:
    argv, modules = first_spawn(tmp_path, "1")
    # The first spawn is the agent's supervisor, started by the early path before the executor's
    # code is loaded; the agent's command line goes to it later, over its control socket.
    assert any(a.endswith("supervisor.py") for a in argv), argv
    assert "/bin/sh" not in argv and "hello" not in argv, argv
    assert "orchestrate.process.prestart" in modules  # the watch fired at the early spawn
    assert "orchestrate.executors.claude_code" not in modules
    # Spawned with os.posix_spawn and a bare socket pair: subprocess (threading, selectors) and
    # socket.py's enums come after it.
    assert "subprocess" not in modules and "socket" not in modules and "threading" not in modules
    found = {name: why for name, why in NOT_BEFORE_THE_SPAWN.items() if loaded(modules, name)}
    assert not found, f"loaded before the supervisor's spawn: {found}"
    sent = at_send(tmp_path)
    assert "orchestrate.executors.claude_code" in sent
    found = {name: why for name, why in NOT_BEFORE_THE_SPAWN.items() if loaded(sent, name)}
    assert not found, f"loaded before the agent's command line was sent: {found}"


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
