"""Adversarial review of the early start's supervisor when it is a fork of `orchestrate run`
(process/prestart.py): the child must take nothing of ours with it.  Output we had buffered and not
yet flushed is written once, by us (a child that flushed it would write it twice, or into the
agent's pipes, where the run would read it as the agent's); an atexit hook of ours runs once, in
our process; the agent holds no fd but its three pipes."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import FAKE_CLAUDE

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the supervisor is Linux's")

HARNESS = """
import atexit, os, sys
out = sys.argv[1]
atexit.register(lambda: open(os.path.join(out, "atexit-%d" % os.getpid()), "w").close())
sys.stdout.write("BUFFERED-OUT ")  # a pipe: block-buffered, still in our buffer at the fork
sys.stderr.write("BUFFERED-ERR ")  # no newline: still in stderr's line buffer
open(os.path.join(out, "cli"), "w").write(str(os.getpid()))
sys.argv = ["orchestrate", *sys.argv[2:]]
from orchestrate.cli.early import main
main()
"""


def test_the_supervisor_takes_nothing_of_ours(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLAUDE))}"
    args = ["run", "-e", "claude-code", "--base-command", command, "--cwd", str(tmp_path)]
    args += ["--approvals", "deny", "--output", "jsonl", "hi"]
    done = subprocess.run(
        [sys.executable, "-c", HARNESS, str(out), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ORCHESTRATE_STORE": "off", "ORCHESTRATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"outcome":"success"' in done.stdout.splitlines()[-1]
    assert done.stdout.count("BUFFERED-OUT") == 1, done.stdout[-2000:]
    assert done.stderr.count("BUFFERED-ERR") == 1, done.stderr[-2000:]
    cli = int((out / "cli").read_text())
    assert sorted(p.name for p in out.glob("atexit-*")) == [f"atexit-{cli}"]


# What an instrumentation library loaded by the site (ddtrace, OpenTelemetry's auto-instrumentation:
# a sitecustomize) does: a hook for every fork's child, which here notes the process and says so.
SITECUSTOMIZE = """
import os
def _child():
    with open(os.environ["HOOK_LOG"], "a") as f:
        f.write("%d\\n" % os.getpid())
    os.write(1, b"HOOK-IN-CHILD\\n")
os.register_at_fork(after_in_child=_child)
"""


def test_no_fork_hook_of_the_site_runs_in_the_supervisor_or_the_agent(tmp_path: Path) -> None:
    """A fork hook our interpreter's site registered must not run in the supervisor (it wrote into
    our --output jsonl) nor in the agent's process before its exec (it wrote into the agent's
    stdout, a protocol_error entry in the run): the spawned `python -I -S` supervisor ran none."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp_path / "hooks"
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLAUDE))}"
    args = ["run", "-e", "claude-code", "--base-command", command, "--cwd", str(tmp_path)]
    path = os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(site)]).lstrip(os.pathsep)
    done = subprocess.run(
        [sys.executable, "-m", "orchestrate", *args, "--approvals", "deny", "--output", "jsonl", "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "PYTHONPATH": path,
            "HOOK_LOG": str(log),
            "ORCHESTRATE_STORE": "off",
            "ORCHESTRATE_HOME": str(tmp_path),
        },
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "HOOK-IN-CHILD" not in done.stdout, done.stdout[-2000:]
    assert '"protocol_error"' not in done.stdout
    assert not log.exists(), log.read_text()
