"""Adversarial review of the cleanup of stale run cgroups (``orchestrate-PID-N`` directories left by
a CLI killed before its supervisor could remove them): whatever collects them must never take a
cgroup that may be a live run's, nor kill what is in one.  Beside our run's cgroup, in the same
parent, lie: an empty one named for a live process (a run of another orchestrate may be between
making its cgroup and its agent's joining it; its pid may also be one of another pid namespace),
a populated one named for a dead process (whatever is in it is somebody's), and directories that
only look like ours.  After a real `orchestrate run`, every one is still there and its process
alive."""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrate.process import containment

from .helpers import FAKE_CLAUDE, pid_alive


def _parent() -> str | None:
    if sys.platform != "linux" or os.environ.get("ORCHESTRATE_CGROUPS") == "0":
        return None
    made = containment.new_cgroup()
    if made is None:
        return None
    os.rmdir(made)
    return os.path.dirname(made)


PARENT = _parent()
pytestmark = pytest.mark.skipif(PARENT is None, reason="no writable cgroup v2 here")


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait(10)
    assert not pid_alive(done.pid)
    return done.pid


@pytest.fixture
def neighbours() -> Iterator[tuple[dict[str, Path], subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    assert PARENT is not None
    live = subprocess.Popen(["sleep", "60"])  # a creator that is alive
    inmate = subprocess.Popen(["sleep", "60"])  # a process in a cgroup whose creator is dead
    dead = _dead_pid()
    dirs = {
        "live creator, empty": Path(PARENT, f"orchestrate-{live.pid}-7"),
        "dead creator, populated": Path(PARENT, f"orchestrate-{dead}-7"),
        "not ours (no counter)": Path(PARENT, f"orchestrate-{dead}"),
        "not ours (suffix)": Path(PARENT, f"orchestrate-{dead}-7x"),
        "not ours (prefix)": Path(PARENT, f"orchestrated-{dead}-7"),
    }
    try:
        for path in dirs.values():
            path.mkdir()
        (dirs["dead creator, populated"] / "cgroup.procs").write_text(str(inmate.pid))
        yield dirs, live, inmate
    finally:
        for process in (live, inmate):
            process.kill()
            process.wait(10)
        for path in dirs.values():
            with contextlib.suppress(OSError):
                path.rmdir()


def _can_unshare() -> bool:
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.parametrize("namespace", ["ours", "another pid namespace"])
def test_a_run_leaves_its_neighbours_cgroups_alone(
    neighbours: tuple[dict[str, Path], subprocess.Popen[bytes], subprocess.Popen[bytes]],
    tmp_path: Path,
    namespace: str,
) -> None:
    """In another pid namespace (unshare, bubblewrap, a sandbox without a cgroup namespace: the same
    cgroup directory), a live run's number is no process there: still not a dead run's."""
    dirs, live, inmate = neighbours
    prefix: list[str] = []
    if namespace != "ours":
        if not _can_unshare():
            pytest.skip("no unshare --pid here")
        prefix = ["unshare", "--pid", "--fork", "--mount-proc"]
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLAUDE))}"
    args = ["run", "-e", "claude-code", "--base-command", command, "--cwd", str(tmp_path)]
    done = subprocess.run(
        [
            *prefix,
            sys.executable,
            "-m",
            "orchestrate",
            *args,
            "--approvals",
            "deny",
            "--output",
            "jsonl",
            "hi",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ORCHESTRATE_STORE": "off", "ORCHESTRATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for what, path in dirs.items():
        assert path.is_dir(), f"{what}: {path.name} was removed"
    assert pid_alive(live.pid) and pid_alive(inmate.pid)
    procs = (dirs["dead creator, populated"] / "cgroup.procs").read_text().split()
    assert procs == [str(inmate.pid)]
