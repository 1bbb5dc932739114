"""The `orchestrate` process stopped mid-run (SIGKILL, SIGTERM, a closed terminal, Ctrl-C twice):
each time the agent and its whole tree, escapees included, are gone within seconds."""

from __future__ import annotations

import os
import secrets
import select
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ptyprocess import PtyProcess

from orchestrate.process import containment

from .helpers import FAKE_CLAUDE, FIXTURES, marked, pid_alive

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux containment")

ESCAPER = FIXTURES / "bin" / "fake_escaper.py"
AGENT = shlex.join([sys.executable, str(ESCAPER), sys.executable, str(FAKE_CLAUDE)])


@pytest.fixture
def mark() -> Iterator[str]:
    value = f"3000.{secrets.randbelow(10**9)}"
    yield value
    for pid in marked(value):  # only after a failure
        os.kill(pid, signal.SIGKILL)


def argv(tmp_path: Path, prompt: str) -> list[str]:
    return [
        sys.executable, "-m", "orchestrate", "run", "--executor", "claude-code", "--base-command", AGENT,
        "--approvals", "deny", "--output", "jsonl", "--cwd", str(tmp_path), prompt,
    ]  # fmt: skip


def environment(tmp_path: Path, mark: str, cgroups: str = "1") -> dict[str, str]:
    return {
        **os.environ,
        "ESCAPE_PIDS": str(tmp_path / "pids"),
        "ESCAPE_MARK": mark,
        "ORCHESTRATE_CGROUPS": cgroups,
    }


def read_until(fd: int, text: bytes, seconds: float = 20) -> bytes:
    """Read ``fd`` until ``text`` shows; bounded."""
    seen = b""
    deadline = time.monotonic() + seconds
    while text not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"{text!r} did not show; got {seen[-500:]!r}"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 65536)
            assert chunk, f"end of output before {text!r}; got {seen[-500:]!r}"
            seen += chunk
    return seen


def the_tree(tmp_path: Path, mark: str) -> dict[str, int]:
    """The agent, its supervisor and both escapees, once all of them run."""
    deadline = time.monotonic() + 10
    while not (tmp_path / "pids").exists() or len(marked(mark)) < 2:
        assert time.monotonic() < deadline, "the escaper did not start its escapees"
        time.sleep(0.01)
    pids = {k: int(v) for k, v in (line.split() for line in (tmp_path / "pids").read_text().splitlines())}
    stat = Path(f"/proc/{pids['agent']}/stat").read_text()
    pids["supervisor"] = int(stat[stat.rindex(")") + 2 :].split()[1])
    assert all(pid_alive(pid) for pid in pids.values())
    return pids


def survivors(pids: dict[str, int], mark: str, seconds: float) -> dict[str, int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = {k: v for k, v in pids.items() if pid_alive(v)}
        if not left and not marked(mark):
            return {}
        time.sleep(0.02)
    return {**left, **{f"marked {p}": p for p in marked(mark)}}


def cgroups_of(pid: int) -> list[str]:
    parent = containment._find_our_cgroup()
    return [] if parent is None else [p.name for p in Path(parent).glob(f"orchestrate-{pid}-*")]


@pytest.mark.parametrize("cgroups", ["1", "0"], ids=["cgroup", "supervisor-alone"])
def test_sigkill_of_orchestrate_leaves_nothing(tmp_path: Path, mark: str, cgroups: str) -> None:
    cli = subprocess.Popen(
        argv(tmp_path, "slow"), env=environment(tmp_path, mark, cgroups), stdout=subprocess.PIPE
    )
    try:
        assert cli.stdout is not None
        read_until(cli.stdout.fileno(), b"w0 w1 w2")
        pids = the_tree(tmp_path, mark)
        cli.kill()  # nothing of ours runs after this: the supervisor sees its control socket close
        assert cli.wait(10) == -signal.SIGKILL
        assert survivors(pids, mark, 5) == {}
        assert cgroups_of(cli.pid) == []
    finally:
        cli.kill()
        cli.wait()
        cli.stdout.close()  # type: ignore[union-attr]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_and_sigint_stop_the_turn_and_exit_with_their_code(
    tmp_path: Path, mark: str, sig: signal.Signals, code: int
) -> None:
    cli = subprocess.Popen(
        argv(tmp_path, "slow"),
        env=environment(tmp_path, mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert cli.stdout is not None and cli.stderr is not None
        read_until(cli.stdout.fileno(), b"w0 w1 w2")
        pids = the_tree(tmp_path, mark)
        cli.send_signal(sig)
        out, err = cli.communicate(timeout=30)
        assert cli.returncode == code, err
        assert b"interrupting" in err and b"w49" not in out  # the turn was stopped, not finished
        assert survivors(pids, mark, 0.5) == {}  # gone before the CLI exited
        assert cgroups_of(cli.pid) == []
    finally:
        cli.kill()
        cli.wait()


def test_a_closed_terminal_stops_the_run_and_exits_129(tmp_path: Path, mark: str) -> None:
    cli = PtyProcess.spawn(argv(tmp_path, "slow"), env=environment(tmp_path, mark), dimensions=(24, 200))
    try:
        read_until(cli.fd, b"w0 w1 w2")
        pids = the_tree(tmp_path, mark)
        cli.fileobj.close()  # the terminal goes away: the kernel sends SIGHUP to its session
        cli.closed = True
        status = wait_status(cli.pid, 30)
        assert os.waitstatus_to_exitcode(status) == 129
        assert survivors(pids, mark, 0.5) == {}
    finally:
        if pid_alive(cli.pid):
            os.kill(cli.pid, signal.SIGKILL)
            wait_status(cli.pid, 5)


def test_a_second_ctrl_c_stops_a_hung_agent_at_once(tmp_path: Path, mark: str) -> None:
    # "hang": the fake ignores SIGTERM and never answers the interrupt, so the first Ctrl-C waits.
    cli = subprocess.Popen(
        argv(tmp_path, "hang"),
        env=environment(tmp_path, mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert cli.stdout is not None
        read_until(cli.stdout.fileno(), b"system_message")
        pids = the_tree(tmp_path, mark)
        cli.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert cli.poll() is None  # still waiting for the agent to answer the interrupt
        cli.send_signal(signal.SIGINT)
        second = time.monotonic()
        _, err = cli.communicate(timeout=10)
        assert time.monotonic() - second < 3.5, err
        assert cli.returncode == 130, err
        assert b"stopping now" in err
        assert survivors(pids, mark, 0.5) == {}
    finally:
        cli.kill()
        cli.wait()


def wait_status(pid: int, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    raise AssertionError(f"process {pid} did not exit within {seconds} s")
