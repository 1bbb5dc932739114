"""Leftover cgroups (supervisor.py's cgroup_sweep): a supervisor SIGKILLed never removes its run's
cgroup, and neither does an orchestrate killed with it; the next supervisor to finish removes a few
of those, once its own agent has exited: only ``orchestrate-PID-N`` whose PID is no live process,
and only empty ones.  Real cgroups, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrate.process import containment, prestart, supervisor
from orchestrate.process.spec import ProcessSpec

from .test_containment import CGROUPS

pytestmark = pytest.mark.skipif(not CGROUPS, reason="no writable cgroup v2 here")

# No process has a pid above pid_max: a run named with it is certainly dead.  Our names end in our
# pid: another test process sweeping at the same time may remove ours (fair), never collide.
DEAD = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
ME = os.getpid()


@pytest.fixture
def parent() -> Iterator[Path]:
    """Our cgroup, cleared of leftovers first (they are garbage by definition); what a test made is
    removed after it, whatever happened."""
    found = containment._find_our_cgroup()
    assert found is not None
    path = Path(found)
    supervisor.cgroup_sweep(found, removals=10**6, tries=10**6)
    before = set(path.iterdir())
    yield path
    for made in set(path.iterdir()) - before:
        if made.is_dir() and made.name.startswith("orchestrate-"):
            supervisor.cgroup_kill(str(made))
            supervisor.cgroup_remove(str(made), 5)


def _old(*paths: Path) -> None:
    """Made long ago, as a leftover is (a cgroup younger than SWEEP_AGE may be a live run's)."""
    for path in paths:
        then = time.time() - supervisor.SWEEP_AGE - 1
        os.utime(path, (then, then))


def _in_cgroup(path: Path) -> subprocess.Popen[bytes]:
    """A process moved into the cgroup ``path`` (so that it is not empty)."""
    proc = subprocess.Popen(["/bin/sleep", "30"])
    (path / "cgroup.procs").write_text(str(proc.pid))
    return proc


def test_only_empty_cgroups_of_dead_runs_are_removed(parent: Path) -> None:
    removable = parent / f"orchestrate-{DEAD}-{ME}1"
    live = parent / f"orchestrate-{ME}-{DEAD}"  # our own pid: a live run's
    busy = parent / f"orchestrate-{DEAD}-{ME}2"
    nested = parent / f"orchestrate-{DEAD}-{ME}3"
    names = (f"orchestrate-x-{ME}", f"orchestrate-{DEAD}{ME}", f"notours-{DEAD}-{ME}")  # not ours
    others = [parent / name for name in names]
    for path in (removable, live, busy, nested, nested / "sub", *others):
        path.mkdir()
    _old(removable, live, busy, nested, *others)
    held = _in_cgroup(busy)
    try:
        removed = supervisor.cgroup_sweep(str(parent), removals=10**6, tries=10**6)
        assert removable.name in removed or not removable.exists()  # (or another's sweep did it)
        assert not removable.exists()
        assert all(name.startswith(f"orchestrate-{DEAD}-") for name in removed)  # dead runs' only
        assert all(path.is_dir() for path in (live, busy, nested, nested / "sub", *others))
        assert held.poll() is None  # nothing is killed: a process in a leftover stays
    finally:
        held.kill()
        held.wait(10)
        for path in (nested / "sub", *others):
            path.rmdir()


def test_a_sweep_is_bounded(parent: Path) -> None:
    # In a cgroup of its own under ours: a supervisor of an earlier test finishing now sweeps ours,
    # and would take some of these (the counts below would then be off by what it took).
    private = parent / f"sweep-test-{ME}"
    private.mkdir()
    made = [private / f"orchestrate-{DEAD}-{ME}{n}" for n in range(1, 9)]
    try:
        for path in made:
            path.mkdir()
        _old(*made)
        removed = supervisor.cgroup_sweep(str(private))
        assert len(removed) == supervisor.SWEEP_REMOVALS
        assert sum(path.exists() for path in made) == len(made) - supervisor.SWEEP_REMOVALS
        # Tries bound the names attempted, removed or not (a busy leftover costs an rmdir too).
        assert len(supervisor.cgroup_sweep(str(private), removals=10, tries=1)) == 1
    finally:
        for path in made:
            if path.exists():
                path.rmdir()
        private.rmdir()


def test_a_finished_run_removes_a_dead_runs_leftover(parent: Path, tmp_path: Path) -> None:
    """The supervisor sweeps once its agent has exited (never before: an rmdir may wait for a grace
    period), and the run's own cgroup is gone too."""
    leftover = parent / f"orchestrate-{DEAD}-{ME}"
    leftover.mkdir()
    _old(leftover)
    started = prestart.prestart(ProcessSpec(["/bin/true"], tmp_path, {"PATH": "/usr/bin:/bin"}))
    assert started is not None
    try:
        assert started.popen.wait(10) == 0
        own = started.launch.cgroup
    finally:
        started.discard()
    assert own is not None and not Path(own).exists()
    assert not leftover.exists()


def test_a_killed_supervisor_leaves_its_cgroup_for_the_next_run(parent: Path, tmp_path: Path) -> None:
    """How leftovers come about: a supervisor SIGKILLed, in a process that is then gone (here a
    python of its own, killed too), leaves its empty cgroup; the next run's supervisor removes it."""
    code = (
        "import os, signal, sys\n"
        "from orchestrate.process.prestart import prestart\n"
        "from orchestrate.process.spec import ProcessSpec\n"
        "started = prestart(ProcessSpec(['/bin/sleep', '30'], '/', {'PATH': '/usr/bin:/bin'}))\n"
        "print(started.launch.cgroup, flush=True)\n"
        "os.kill(started.popen.pid, signal.SIGKILL)\n"  # the agent dies with it (PDEATHSIG)
        "started.popen.wait(10)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"  # and we die before cleaning up
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = Path(done.stdout.strip())
    deadline = time.monotonic() + 10
    while (left / "cgroup.procs").read_text().split():  # its agent is on its way out
        assert time.monotonic() < deadline, "the agent outlived its supervisor"
        time.sleep(0.01)
    assert left.is_dir()  # left over
    _old(left)
    started = prestart.prestart(ProcessSpec(["/bin/true"], tmp_path, {"PATH": "/usr/bin:/bin"}))
    assert started is not None
    try:
        assert started.popen.wait(10) == 0
    finally:
        started.discard()
    assert not left.exists()
