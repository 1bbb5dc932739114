"""Review of the supervisor spawned first (process/prestart.py's standby, cli/early.py): attacks on
its message, its deadline and the agent it starts, with real processes.  Every would-be agent here
creates a marker file when it runs: its absence proves nothing was started."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from orchestrate.errors import SpawnError
from orchestrate.process import prestart, supervisor
from orchestrate.process.pipes import AgentProcess
from orchestrate.process.spec import ProcessSpec

from .helpers import marked
from .test_containment import FAST, mark, our_cgroups
from .test_supervisor_first import (
    Spawned,
    _start_error,
    answer,
    spawned,
    started_nothing,
    supervise,
    wait_file_exists,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux supervisor")

__all__ = ["mark", "spawned"]  # the fixtures, imported for the tests below


def _body(*fields: bytes) -> bytes:
    body = b"\0".join(fields)
    return supervisor.MAGIC + len(body).to_bytes(4, "big") + body


def _touch(marker: Path) -> bytes:
    return b"touch " + bytes(marker) + b"; exec sleep 30"


# A count is ASCII digits; one too long for int() (over 4300 digits) raised ValueError in the
# supervisor: a traceback on the agent's stderr and exit 1, not the 125 of a refused message.
LONG_COUNTS = {
    "arguments": lambda m: _body(b"", b"", b"0" * 4999 + b"3", b"-", b"/bin/sh", b"-c", _touch(m)),
    "entries": lambda m: _body(b"", b"", b"3", b"0" * 4999 + b"1", b"/bin/sh", b"-c", _touch(m), b"A=1"),
}


@pytest.mark.parametrize("count", sorted(LONG_COUNTS))
def test_a_count_too_long_for_int_is_refused_like_any_bad_message(
    tmp_path: Path, spawned: Spawned, count: str
) -> None:
    marker = tmp_path / "started"
    proc, ours = supervise(spawned)
    ours.sendall(LONG_COUNTS[count](marker))
    started_nothing(proc, ours, marker)


def test_a_short_count_with_leading_zeros_still_starts(tmp_path: Path, spawned: Spawned) -> None:
    """The control: the same message with a count of a few digits is heard."""
    marker = tmp_path / "started"
    proc, ours = supervise(spawned)
    ours.sendall(_body(b"", b"", b"003", b"-", b"/bin/sh", b"-c", _touch(marker)))
    assert answer(ours).startswith(b"ok ")
    wait_file_exists(marker)  # (the agent ran)
    ours.sendall(b"kill\n")
    assert proc.wait(10) != supervisor.NOTHING_STARTED


# --- the agent's environment: exactly the spec's, whichever way it was started ----------------------

# No locale variable: the supervisor's Python then coerces its own locale (PEP 538) and sets
# LC_CTYPE=C.UTF-8 in its environment; an agent that inherited that environment got it too.
BARE = {"PATH": "/usr/bin:/bin", "ORCHESTRATE_REVIEW": "1"}


def _environ_of(pid: int) -> dict[bytes, bytes]:
    deadline = time.monotonic() + 10
    while True:  # /proc/PID/environ is the supervisor's until the agent has exec'd
        raw = Path(f"/proc/{pid}/environ").read_bytes()
        if b"ORCHESTRATE_REVIEW=1" in raw.split(b"\0"):
            break
        assert time.monotonic() < deadline, "the agent never ran"
        time.sleep(0.01)
    return dict(entry.partition(b"=")[::2] for entry in raw.split(b"\0") if entry)


def _agent_environ(how: str, tmp_path: Path) -> dict[bytes, bytes]:
    spec = ProcessSpec(["/bin/sleep", "30"], tmp_path, dict(BARE))

    async def spawn() -> dict[bytes, bytes]:
        if how == "pty":
            from orchestrate.process.pty import PtyAgentProcess

            pty = await PtyAgentProcess.spawn(spec)
            try:
                return _environ_of(pty.pid)
            finally:
                pty.containment.kill()
                await pty.wait(5.0)
        if how == "early":
            started = prestart.prestart(spec)
            assert started is not None
            proc = await AgentProcess.adopt(started)
        else:
            proc = await AgentProcess.spawn(spec)
        try:
            return _environ_of(proc.pid)
        finally:
            await proc.shutdown(FAST)

    return anyio.run(spawn)


@pytest.mark.parametrize("how", ["early", "spawn", "pty"])
def test_the_agent_gets_exactly_the_specs_environment(tmp_path: Path, how: str) -> None:
    """Early or spawned, the same: the early start (execvpe with the message's environment) gave the
    spec's alone while the ordinary spawn also passed on the supervisor's LC_CTYPE, so an agent's
    environment depended on whether it started early."""
    got = _agent_environ(how, tmp_path)
    expected = {k.encode(): v.encode() for k, v in BARE.items()}
    if how == "pty":
        expected[b"TERM"] = b"xterm-256color"  # what a terminal adds, as before
    assert got == expected


# --- signals before the agent exists -------------------------------------------------------------


def test_signals_before_the_agent_are_kept_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """A supervisor now waits up to MESSAGE_SECONDS for its message: a flood of signals meanwhile
    (here 10,000 of each kind it forwards) grew its list of pending signals by one entry per
    signal, without bound.  The kernel itself keeps a standard signal pending once: so do we."""
    monkeypatch.setattr(supervisor._State, "agent", None)
    monkeypatch.setattr(supervisor._State, "pending", [])
    for _ in range(10_000):
        for sig in supervisor.FORWARDED:
            supervisor._forward(sig, None)
    assert sorted(supervisor._State.pending) == sorted(supervisor.FORWARDED)


def test_a_flooded_standby_still_starts_its_agent_and_forwards(tmp_path: Path) -> None:
    """Real processes: SIGUSR1 sent to a standby supervisor for half a second, then its message:
    the agent runs and is sent the SIGUSR1 (it dies of it: it had no handler yet)."""
    marker = tmp_path / "started"
    waiting = prestart.standby()
    assert waiting is not None
    _handlers_in_place(waiting.popen.pid)
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        os.kill(waiting.popen.pid, signal.SIGUSR1)
    spec = ProcessSpec(["/bin/sh", "-c", f"touch {marker}; exec sleep 30"], tmp_path, dict(BARE))
    started = waiting.start(spec)
    assert started is not None
    try:
        assert started.popen.wait(10) == -signal.SIGUSR1  # the agent's death, as the supervisor's
    finally:
        started.discard()


# --- the deadline for the message ------------------------------------------------------------------


def _handlers_in_place(pid: int) -> None:
    """Wait until the supervisor catches SIGUSR1: it is then reading its message, deadline set."""
    caught = 0
    deadline = time.monotonic() + 10
    while not caught & (1 << (signal.SIGUSR1 - 1)):
        assert time.monotonic() < deadline, "the supervisor never got going"
        time.sleep(0.01)
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(status.split("SigCgt:")[1].split()[0], 16)


def _reading_its_message(pid: int) -> None:
    """Wait until the supervisor is blocked in its poll for the message (its deadline is set):
    the only poll before the message is there."""
    deadline = time.monotonic() + 10
    while "poll" not in Path(f"/proc/{pid}/wchan").read_text():
        assert time.monotonic() < deadline, "the supervisor never waited for its message"
        time.sleep(0.005)


def _marker_spec(tmp_path: Path) -> tuple[Path, ProcessSpec]:
    marker = tmp_path / "started"
    return marker, ProcessSpec(["/bin/sh", "-c", f"touch {marker}; exec sleep 30"], tmp_path, dict(BARE))


def test_a_parent_too_slow_for_the_deadline_falls_back_having_started_nothing(tmp_path: Path) -> None:
    """We were stopped (Ctrl-Z) or slow past the supervisor's deadline: it has exited, so the
    message cannot be sent; the early start gives up (the run then spawns its own agent), the
    supervisor is reaped, nothing ran, no cgroup is left."""
    marker, spec = _marker_spec(tmp_path)
    waiting = prestart.standby(fork=False, seconds=1.0)  # forked: tests/test_supervisor_fork.py
    assert waiting is not None
    _reading_its_message(waiting.popen.pid)  # its deadline counts from there (a loaded machine)
    time.sleep(1.8)
    began = time.monotonic()
    assert waiting.start(spec) is None
    assert waiting.popen.returncode == supervisor.NOTHING_STARTED
    assert time.monotonic() - began < 5.0
    time.sleep(0.2)
    assert not marker.exists() and our_cgroups() == []


def test_a_message_read_past_the_deadline_is_a_spawn_error_not_a_hang(tmp_path: Path) -> None:
    """The message was sent in time but the supervisor was stopped until past its deadline: it
    starts nothing, and the run that adopts it gets a SpawnError at once."""
    marker, spec = _marker_spec(tmp_path)
    waiting = prestart.standby(fork=False, seconds=1.0)  # forked: tests/test_supervisor_fork.py
    assert waiting is not None
    _reading_its_message(waiting.popen.pid)
    os.kill(waiting.popen.pid, signal.SIGSTOP)
    try:
        started = waiting.start(spec)  # into the socket's buffer
        assert started is not None
        time.sleep(1.5)
    finally:
        os.kill(waiting.popen.pid, signal.SIGCONT)

    async def adopt() -> str:
        with pytest.raises(SpawnError) as caught:
            await AgentProcess.adopt(started)
        return str(caught.value)

    began = time.monotonic()
    said = anyio.run(adopt)
    assert time.monotonic() - began < 5.0
    assert started.popen.returncode == supervisor.NOTHING_STARTED
    assert "supervisor" in said, said
    time.sleep(0.2)
    assert not marker.exists() and our_cgroups() == []


# --- Ctrl-C of orchestrate in the early window ---------------------------------------------------

# Runs `orchestrate ARGS...` (cli/early.py's main) and stops it at POINT: "unsent" (the supervisor
# spawned, its message not sent: inside the spec's building) or "sent" (the agent running, not
# adopted yet); says "ready" there, and at its end whether the supervisor was reaped.
INTERRUPTED = r"""
import os, sys, time
from orchestrate.cli import early
from orchestrate.process import prestart
point, marker = sys.argv[1], sys.argv[2]
seen = []
real_standby, real_built, real_start = prestart.standby, early._built, prestart.Standby.start
def standby():
    made = real_standby()
    seen.append(made)
    return made
def built(given):
    if point == "unsent":
        print("ready", flush=True)
        time.sleep(30)
    return real_built(given)
def start(self, spec):
    started = real_start(self, spec)
    if point == "sent":
        deadline = time.monotonic() + 10
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        print("ready", flush=True)
        time.sleep(30)
    return started
prestart.standby, early._built, prestart.Standby.start = standby, built, start
sys.argv = ["orchestrate", *sys.argv[3:]]
try:
    early.main()
finally:
    print("reaped", [made.popen.returncode for made in seen], flush=True)
"""


@pytest.mark.parametrize("point", ["unsent", "sent"])
def test_ctrl_c_in_the_early_window_leaves_nothing(tmp_path: Path, point: str, mark: str) -> None:
    """SIGINT to orchestrate while its supervisor waits for the message, or while the agent (which
    forked a grandchild that called setsid) runs unadopted: orchestrate exits 130, having reaped
    its supervisor, and nothing it started survives."""
    marker = tmp_path / "started"
    agent = f"touch {marker}; setsid sleep {mark} & exec sleep {mark}"
    command = f"/bin/sh -c {shlex.quote(agent)} agent"
    args = ["run", "-e", "claude-code", "--base-command", command, "--cwd", str(tmp_path)]
    cli = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED, point, str(marker), *args, "--approvals", "deny", "hi"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "ORCHESTRATE_STORE": "off", "ORCHESTRATE_HOME": str(tmp_path)},
    )
    try:
        assert cli.stdout is not None
        assert cli.stdout.readline() == b"ready\n", cli.stderr.read() if cli.stderr else b""
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=20)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait(10)
    assert cli.returncode == 130, err.decode(errors="replace")[-2000:]
    reaped = out.decode().split("reaped ")[-1].strip()
    if point == "unsent":
        assert reaped == f"[{supervisor.NOTHING_STARTED}]"  # told nothing: started nothing
        assert not marker.exists()
    else:
        assert reaped == f"[{-signal.SIGKILL}]" and marker.exists()  # the agent ran, was killed
    deadline = time.monotonic() + 10
    while marked(mark):
        assert time.monotonic() < deadline, f"left running: {marked(mark)}"
        time.sleep(0.05)
    assert our_cgroups() == []


# --- starts refused or discarded leave nothing -----------------------------------------------------


def _our_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def _our_children() -> list[int]:
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == me:
                found.append(int(entry))
    return found


def test_many_refused_or_discarded_early_starts_leave_no_fd_child_or_cgroup(tmp_path: Path) -> None:
    """60 early starts: refused once the supervisor was spawned (a bad --env), told what no exec
    carries, or told and then discarded unadopted: afterwards no fd, no child (not even a zombie)
    and no cgroup of ours is left."""
    from orchestrate.cli import early

    _, spec = _marker_spec(tmp_path)
    args = ["run", "-e", "claude-code", "--base-command", "/bin/true", "--cwd", str(tmp_path)]
    args += ["--approvals", "deny", "--env", "NOEQUALS", "hello"]
    fds, children = _our_fds(), _our_children()
    for i in range(60):
        if i % 3 == 0:
            assert early.begin(args) is None
            early.discard()
        elif i % 3 == 1:
            assert prestart.prestart(ProcessSpec(["/bin/true", "a\0b"], tmp_path, dict(BARE))) is None
        else:
            started = prestart.prestart(spec)
            assert started is not None
            started.discard()
    assert _our_fds() == fds
    assert _our_children() == children
    assert our_cgroups() == []


# --- no supervisor spawned for a run that cannot start early ---------------------------------------


def test_the_early_executors_are_those_the_registry_allows() -> None:
    from orchestrate.cli import early
    from orchestrate.executors.base import Executor
    from orchestrate.registry import _BUILTINS, default_registry

    allowed = set()
    for name in _BUILTINS:
        cls = default_registry.get(name)
        plain = cls.prepare is Executor.prepare and cls.policy_args is Executor.policy_args
        if cls.transport == "pipes" and plain:
            allowed.add(name)
    assert allowed == early._EARLY_EXECUTORS


@pytest.mark.parametrize("executor", ["gemini", "cursor", "terminal"])
def test_a_run_that_cannot_start_early_spawns_no_supervisor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, executor: str
) -> None:
    """Its executor's code says so once loaded (another transport, a prepare step, policy
    arguments): a supervisor spawned before was ended and waited for, for nothing."""
    from orchestrate.cli import early

    spawned: list[prestart.Standby | None] = []
    real = prestart.standby

    def watched() -> prestart.Standby | None:
        spawned.append(real())
        return spawned[-1]

    monkeypatch.setattr(prestart, "standby", watched)
    args = ["run", "-e", executor, "--base-command", "/bin/true", "--cwd", str(tmp_path)]
    args += ["--approvals", "deny"]
    try:
        assert early.begin([*args, "hello"]) is None
    finally:
        early.discard()
    assert spawned == []


# --- the message cut inside a multi-byte field; start failures early and spawned ---------------------


@pytest.mark.parametrize("then", ["end of file", "silence"])
def test_a_message_cut_inside_a_multibyte_character_starts_nothing(
    tmp_path: Path, spawned: Spawned, then: str
) -> None:
    marker = tmp_path / "started"
    whole = supervisor.encode(["/bin/sh", "-c", f"touch {marker}; exec sleep 30", "été"], None, BARE, None)
    cut = whole.index("é".encode()) + 1  # between the two bytes of the é
    proc, ours = supervise(spawned, seconds=1.0)
    ours.sendall(whole[:cut])
    if then == "end of file":
        ours.shutdown(socket.SHUT_WR)
    started_nothing(proc, ours, marker)


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("a directory that is a file", "does not exist or is not a directory"),
        ("a program not executable", "Permission denied"),
        ("a program that is a directory", "Permission denied"),
        ("a relative program not executable", "Permission denied"),
        ("a script whose interpreter is missing", "No such file or directory"),
        ("an empty PATH", "No such file or directory"),
    ],
)
def test_start_failures_say_the_same_early_and_spawned(tmp_path: Path, case: str, why: str) -> None:
    """As on main, where the early start's spawn failed in these cases the same way as the run's."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "plain").write_text("#!/bin/sh\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "orphan").write_text("#!/no/such/interpreter\n")
    (tmp_path / "orphan").chmod(0o755)
    spec = {
        "a directory that is a file": ProcessSpec(["/bin/true"], tmp_path / "file", dict(BARE)),
        "a program not executable": ProcessSpec([str(tmp_path / "plain")], tmp_path, dict(BARE)),
        "a program that is a directory": ProcessSpec([str(tmp_path / "dir")], tmp_path, dict(BARE)),
        "a relative program not executable": ProcessSpec(["./plain"], tmp_path, dict(BARE)),
        "a script whose interpreter is missing": ProcessSpec([str(tmp_path / "orphan")], tmp_path, BARE),
        "an empty PATH": ProcessSpec(["true"], tmp_path, {**BARE, "PATH": ""}),
    }[case]
    early, spawned = _start_error(spec, "early"), _start_error(spec, "spawn")
    assert early == spawned and why in early
    assert our_cgroups() == []
