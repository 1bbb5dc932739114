"""Adversarial review of the early start (cli/early.py, process/prestart.py): `orchestrate run` killed
with SIGKILL at each step of starting its agent early, and an agent that hides a grandchild in a
session of its own.  Nothing of the run may outlive it: every process carrying the run's mark in its
environment (the supervisor, forked or spawned, the agent, the grandchild) is gone within the
supervisor's own bound, whatever step the kill came at."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from orchestrate.process import supervisor

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the supervisor is Linux's")

# The agent: records its pid, forks a grandchild that leaves for a session of its own (setsid)
# and records its pid too; both then sleep.
AGENT = """
import os, sys, time
out = sys.argv[1]
open(os.path.join(out, "agent"), "w").write(str(os.getpid()))
if os.fork() == 0:
    os.setsid()
    open(os.path.join(out, "grandchild"), "w").write(str(os.getpid()))
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""

# `orchestrate run` through its own entry point, killed (SIGKILL, by itself) at the step named
# by argv[1]; the supervisor's pid and cgroup are written to argv[2] as soon as they are known.
HARNESS = """
import os, signal, sys
point, out = sys.argv[1], sys.argv[2]
from orchestrate.process import containment, prestart

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def note(standby):
    if standby is not None:
        with open(os.path.join(out, "supervisor"), "w") as f:
            f.write(f"{standby.popen.pid} {standby.launch.cgroup or ''}")

real_standby = prestart.standby
def standby(*args, **kwargs):
    if point == "before-standby":
        die()
    made = real_standby(*args, **kwargs)
    note(made)
    if point == "after-standby":
        die()
    return made
prestart.standby = standby

real_start = prestart.Standby.start
def start(self, spec):
    if point == "before-spec":
        die()
    made = real_start(self, spec)
    if point == "after-spec":
        die()
    return made
prestart.Standby.start = start

real_send_some = containment.Launch._send_some
def send_some(self, ours):
    if point == "mid-spec":
        half = max(len(self._message) // 2, 1)
        ours.send(self._message[:half])
        die()
    return real_send_some(self, ours)
containment.Launch._send_some = send_some

from orchestrate.cli import early
real_take = early.take
def take():
    made = real_take()
    if point == "adopting":
        die()
    return made
early.take = take

sys.argv = ["orchestrate", *sys.argv[3:]]
early.main()
"""

POINTS = ["before-standby", "after-standby", "before-spec", "mid-spec", "after-spec", "adopting"]
BOUND = supervisor.KILL_SECONDS + 5.0  # the supervisor's own bound to kill its tree, and a margin


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def carrying(mark: str) -> list[int]:
    """Live (not zombie) processes whose environment holds ``mark``: every process of the run,
    whatever it is called and whether or not it told us its pid."""
    needle = mark.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if needle in environ and _state(int(entry)) not in (None, "Z"):
            found.append(int(entry))
    return found


def wait_until(predicate: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return bool(predicate())  # type: ignore[operator]


@pytest.mark.parametrize("point", POINTS)
def test_a_cli_killed_at_any_step_of_the_early_start_leaves_nothing(point: str, tmp_path: Path) -> None:
    mark = f"REVIEW_MARK_{uuid.uuid4().hex}"
    out = tmp_path / "out"
    out.mkdir()
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))} {shlex.quote(str(out))}"
    args = ["run", "-e", "claude-code", "--base-command", command, "--cwd", str(tmp_path)]
    args += ["--approvals", "deny", "--output", "jsonl", "hi"]
    env = {**os.environ, mark: "1", "ORCHESTRATE_STORE": "off", "ORCHESTRATE_HOME": str(tmp_path)}
    cli = subprocess.Popen(
        [sys.executable, "-c", HARNESS, point, str(out), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait(10)
    assert cli.returncode == -signal.SIGKILL, (point, cli.returncode, err[-2000:])
    if point != "before-standby":
        assert (out / "supervisor").exists(), "the early start did not apply: the test proves nothing"
    if point == "adopting":  # everything is loaded by then: the agent has long been running
        assert (out / "agent").exists()
    assert wait_until(lambda: not carrying(mark), BOUND), (point, carrying(mark))
    for name in ("agent", "grandchild"):
        file = out / name
        if file.exists() and file.read_text():
            assert _state(int(file.read_text())) in (None, "Z"), (point, name)
    if point in ("before-standby", "after-standby", "before-spec", "mid-spec"):
        assert not (out / "agent").exists(), (point, "an agent ran with no complete message")
    _remove_our_cgroup(out)


def _remove_our_cgroup(out: Path) -> None:
    """A supervisor told nothing leaves its (empty) cgroup to whoever made it, killed here: not
    left behind by this test (rmdir removes only an empty cgroup)."""
    file = out / "supervisor"
    cgroup = file.read_text().partition(" ")[2] if file.exists() else ""
    if cgroup:
        with contextlib.suppress(OSError):
            os.rmdir(cgroup)


def test_the_check_sees_a_marked_process() -> None:
    """The control: a process carrying the mark is found (else the test above proves nothing)."""
    mark = f"REVIEW_MARK_{uuid.uuid4().hex}"
    sleeper = subprocess.Popen(["sleep", "30"], env={**os.environ, mark: "1"})
    try:
        assert wait_until(lambda: carrying(mark) == [sleeper.pid], 5)
    finally:
        sleeper.kill()
        sleeper.wait(10)
    assert not carrying(mark)
