"""Containment with real processes: every descendant of an agent dies with its run, by each mechanism
the machine offers (cgroup, supervisor alone, process group), and the agent dies with us."""

from __future__ import annotations

import math
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from orchestrate.errors import SpawnError
from orchestrate.process import containment, supervisor
from orchestrate.process.env import build_env
from orchestrate.process.pipes import AgentProcess, Chunk, ProcessSpec, ShutdownPolicy
from orchestrate.process.pty import PtyAgentProcess
from orchestrate.run.terminals import Terminal

from .helpers import FIXTURES, group_members, marked, pid_alive

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(sys.platform != "linux", reason="Linux containment")]

ESCAPER = FIXTURES / "bin" / "fake_escaper.py"
FAST = ShutdownPolicy(interrupt_grace=0.2, stdin_grace=0.3, term_grace=0.3)


def cgroups_writable() -> bool:
    """Decided here on our own, not by the code under test: can we make a cgroup and enter it?"""
    parent = containment._find_our_cgroup()
    if parent is None:
        return False
    probe = Path(parent) / f"orchestrate-probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        child = subprocess.run(
            ["/bin/sh", "-c", f"echo 0 > {probe}/cgroup.procs"], capture_output=True, timeout=10
        )
        return child.returncode == 0
    finally:
        probe.rmdir()


CGROUPS = cgroups_writable()
MODES = [
    pytest.param("cgroup", marks=pytest.mark.skipif(not CGROUPS, reason="no writable cgroup v2 here")),
    "supervisor",
]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("ORCHESTRATE_CGROUPS", "1" if request.param == "cgroup" else "0")
    yield str(request.param)
    parent = containment._find_our_cgroup()
    for name in our_cgroups():  # only after a failure: do not let it spoil the next tests
        supervisor.cgroup_kill(f"{parent}/{name}")
        supervisor.cgroup_remove(f"{parent}/{name}", 5)


@pytest.fixture
def mark(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A command-line marker that every escapee of this test carries; leftovers are killed after."""
    value = f"3000.{secrets.randbelow(10**9)}"
    monkeypatch.setenv("ESCAPE_MARK", value)
    yield value
    for pid in marked(value):  # only after a failure (or the group fallback's documented leak)
        os.kill(pid, signal.SIGKILL)


def escaper(tmp_path: Path, *program: str, **env: str) -> ProcessSpec:
    base = build_env(
        {
            "PATH": "/usr/bin:/bin",
            "ESCAPE_PIDS": str(tmp_path / "pids"),
            "ESCAPE_MARK": os.environ["ESCAPE_MARK"],
        },
        env,
    )
    return ProcessSpec([sys.executable, str(ESCAPER), *program], tmp_path, base)


async def escapees(tmp_path: Path, running: bool = True) -> dict[str, int]:
    """The pids the escaper wrote, once it has (and, if ``running``, both escapees run their marked
    sleep: an agent that exits at once may have its escapees killed before they get there)."""
    target = tmp_path / "pids"
    wanted = 2 if running else 0
    with anyio.fail_after(10):
        while not target.exists() or len(marked(os.environ["ESCAPE_MARK"])) < wanted:  # noqa: ASYNC110
            await anyio.sleep(0.01)
    pids = dict(line.split() for line in target.read_text().splitlines())
    return {name: int(pid) for name, pid in pids.items()}


def alive(pids: dict[str, int]) -> dict[str, int]:
    return {name: pid for name, pid in pids.items() if pid_alive(pid)}


async def settle(pids: dict[str, int], seconds: float = 5.0) -> dict[str, int]:
    """Wait up to ``seconds`` for ``pids`` to die; the survivors."""
    with anyio.move_on_after(seconds):
        while alive(pids):  # noqa: ASYNC110 - another process's death has no event for us
            await anyio.sleep(0.02)
    return alive(pids)


def our_cgroups() -> list[str]:
    parent = containment._find_our_cgroup()
    if parent is None:
        return []
    return [p.name for p in Path(parent).glob(f"orchestrate-{os.getpid()}-*")]


# --- which mechanism ------------------------------------------------------------------------


async def test_the_strongest_mechanism_the_machine_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mark: str
) -> None:
    expected = {"1": "cgroup" if CGROUPS else "supervisor", "0": "supervisor"}
    for switch, mechanism in expected.items():
        monkeypatch.setenv("ORCHESTRATE_CGROUPS", switch)
        proc = await AgentProcess.spawn(escaper(tmp_path, ESCAPE_EXIT="0"))
        assert proc.containment.mechanism == mechanism
        assert proc.pid != proc.process.pid  # the agent, not its supervisor
        await proc.shutdown(FAST)
        assert our_cgroups() == []
        (tmp_path / "pids").unlink(missing_ok=True)
    monkeypatch.setenv("ORCHESTRATE_SUPERVISOR", "0")
    proc = await AgentProcess.spawn(escaper(tmp_path, ESCAPE_EXIT="0"))
    assert proc.containment.mechanism == "group" and proc.pid == proc.process.pid
    await proc.shutdown(FAST)


# --- escapees ---------------------------------------------------------------------------------


async def test_setsid_and_double_fork_escapees_die_at_shutdown(tmp_path: Path, mode: str, mark: str) -> None:
    proc = await AgentProcess.spawn(escaper(tmp_path))
    pids = await escapees(tmp_path)
    assert pids["agent"] == proc.pid and alive(pids) == pids
    assert len(marked(mark)) == 2  # the setsid grandchild and the double-forked daemon
    with anyio.fail_after(15):
        rc = await proc.shutdown(FAST)
    assert rc == -signal.SIGKILL  # the agent ignored SIGTERM; its supervisor exits the same way
    # No wait here: the supervisor reaps the whole tree before it exits.
    assert alive(pids) == {} and marked(mark) == []
    assert our_cgroups() == []


async def test_leftovers_die_when_the_agent_exits_on_its_own(tmp_path: Path, mode: str, mark: str) -> None:
    proc = await AgentProcess.spawn(escaper(tmp_path, ESCAPE_EXIT="7"))
    pids = await escapees(tmp_path, running=False)
    assert await proc.wait(10)
    assert proc.returncode == 7  # the agent's own exit code, through its supervisor
    assert alive(pids) == {} and marked(mark) == []
    await proc.shutdown(FAST)


@pytest.mark.parametrize(
    ("code", "rc"), [("raise SystemExit(0)", 0), ("import os; os.kill(os.getpid(), 15)", -15)]
)
async def test_the_return_code_is_the_agents(tmp_path: Path, mode: str, code: str, rc: int) -> None:
    spec = ProcessSpec([sys.executable, "-c", code], tmp_path, build_env({"PATH": "/usr/bin:/bin"}))
    proc = await AgentProcess.spawn(spec)
    assert await proc.wait(10) and proc.returncode == rc
    await proc.shutdown(FAST)


async def test_a_fork_flood_is_stopped(tmp_path: Path, mode: str, mark: str) -> None:
    proc = await AgentProcess.spawn(escaper(tmp_path, ESCAPE_FLOOD="1"))
    await escapees(tmp_path)
    with anyio.fail_after(10):
        while len(marked(mark)) < 30:  # noqa: ASYNC110 - forks have no event
            await anyio.sleep(0.01)
    with anyio.fail_after(15):
        await proc.shutdown(FAST)  # while it is still forking, one escapee a millisecond
    assert marked(mark) == []


async def test_spawn_failure_is_a_spawn_error_and_leaves_nothing(tmp_path: Path, mode: str) -> None:
    spec = ProcessSpec(["/nonexistent/no-such-agent"], tmp_path, {"PATH": "/usr/bin"})
    with pytest.raises(SpawnError, match=r"no-such-agent.*No such file"):
        await AgentProcess.spawn(spec)
    assert our_cgroups() == []


async def test_the_agent_dies_with_its_supervisor(tmp_path: Path, mode: str, mark: str) -> None:
    proc = await AgentProcess.spawn(escaper(tmp_path))
    pids = await escapees(tmp_path)
    os.kill(proc.process.pid, signal.SIGKILL)  # a hostile agent could do this: same user
    assert await settle({"agent": pids["agent"]}) == {}  # PR_SET_PDEATHSIG
    await proc.shutdown(FAST)
    if mode == "cgroup":  # our own clean-up after the supervisor's: the cgroup still held them
        assert alive(pids) == {} and marked(mark) == [] and our_cgroups() == []
    else:  # documented: without a cgroup, what left the group outlives a killed supervisor
        assert set(alive(pids)) <= {"setsid", "daemon"}


async def test_group_fallback_kills_the_agents_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mark: str
) -> None:
    monkeypatch.setenv("ORCHESTRATE_SUPERVISOR", "0")
    code = (
        "import subprocess, time\n"
        "subprocess.Popen(['sleep', '300'])\n"
        "print('ok', flush=True)\n"
        "time.sleep(300)\n"
    )
    spec = ProcessSpec([sys.executable, "-c", code], tmp_path, build_env({"PATH": "/usr/bin:/bin"}))
    proc = await AgentProcess.spawn(spec)
    assert proc.containment.mechanism == "group"
    assert proc.process.stdout is not None
    await proc.process.stdout.receive()
    assert len(group_members(proc.pid)) == 2
    with anyio.fail_after(15):
        await proc.shutdown(FAST)
    # SIGKILL went to the whole group; a member that is not our child finishes dying on its own
    # time (on a loaded machine, after shutdown returned), so this waits for it, bounded.
    for _ in range(100):  # up to 5 s
        if not group_members(proc.pid):
            break
        await anyio.sleep(0.05)
    assert group_members(proc.pid) == []


# --- signals ------------------------------------------------------------------------------------


async def test_signals_reach_the_agent_and_not_a_reused_pid(tmp_path: Path, mode: str) -> None:
    code = (
        "import os, signal, sys, time\n"
        "for s in (signal.SIGUSR1, signal.SIGTERM):\n"  # os.write: print is not reentrant
        "    signal.signal(s, lambda n, f: os.write(1, signal.Signals(n).name.encode() + b'\\n'))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    spec = ProcessSpec([sys.executable, "-c", code], tmp_path, build_env({"PATH": "/usr/bin:/bin"}))
    proc = await AgentProcess.spawn(spec)
    assert proc.process.stdout is not None
    lines = proc.process.stdout
    with anyio.fail_after(10):
        assert b"ready" in await lines.receive()
        proc.send_signal(signal.SIGUSR1)
        assert b"SIGUSR1" in await lines.receive()
        os.kill(proc.process.pid, signal.SIGTERM)  # to the supervisor: forwarded, not obeyed
        assert b"SIGTERM" in await lines.receive()
    assert proc.returncode is None
    await proc.shutdown(FAST)


def test_the_tree_walk_never_signals_a_process_that_is_not_a_descendant() -> None:
    stranger = subprocess.Popen(["sleep", "30"])  # our child, not a supervisor's
    try:
        supervisor._kill(stranger.pid, {os.getpid() + 1})  # its parent is not among the trusted
        time.sleep(0.1)
        assert stranger.poll() is None
        supervisor._kill(stranger.pid, {os.getpid()})
        assert stranger.wait(5) == -signal.SIGKILL
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.skipif(not CGROUPS, reason="no writable cgroup v2 here")
def test_cgroup_kill_by_freezing_where_cgroup_kill_is_missing(tmp_path: Path, mark: str) -> None:
    path = containment.new_cgroup()
    assert path is not None
    env = {**os.environ, "ESCAPE_PIDS": str(tmp_path / "pids")}
    script = f'echo 0 > {path}/cgroup.procs && exec "$0" "$1"'
    agent = subprocess.Popen(["/bin/sh", "-c", script, sys.executable, str(ESCAPER)], env=env)
    try:
        deadline = time.monotonic() + 10
        while len(marked(mark)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(marked(mark)) == 2
        supervisor.cgroup_kill(path, use_kill_file=False)
        assert agent.wait(5) == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while marked(mark) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marked(mark) == []
        assert supervisor.cgroup_remove(path, 5) and not Path(path).exists()
    finally:
        agent.kill()
        agent.wait()


# --- terminals and commands -----------------------------------------------------------------


async def test_pty_agent_tree_dies_and_the_terminal_signals_reach_the_agent(
    tmp_path: Path, mode: str, mark: str
) -> None:
    code = (
        "import os, signal, subprocess, sys, time\n"
        "for s in (signal.SIGINT, signal.SIGWINCH):\n"
        "    signal.signal(s, lambda n, f: os.write(1, b'got ' + signal.Signals(n).name.encode()))\n"
        f"subprocess.Popen([sys.executable, {str(ESCAPER)!r}])\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    spec = escaper(tmp_path)
    spec = ProcessSpec([sys.executable, "-c", code], tmp_path, spec.env)
    proc = await PtyAgentProcess.spawn(spec)
    send, recv = anyio.create_memory_object_stream[Chunk](math.inf)
    seen = b""

    async def until(text: bytes) -> None:
        nonlocal seen
        while text not in seen:
            seen += (await recv.receive()).data

    async with recv, anyio.create_task_group() as tg:
        tg.start_soon(proc.pump, send)
        with anyio.fail_after(10):
            await until(b"ready")
            pids = await escapees(tmp_path)
            await proc.write(b"\x03")  # Ctrl-C typed in the terminal: the agent's group gets it
            await until(b"got SIGINT")
            proc.resize(30, 100)
            await until(b"got SIGWINCH")
        assert proc.returncode is None  # the supervisor took neither personally
        with anyio.fail_after(15):
            await proc.shutdown(FAST)
        tg.cancel_scope.cancel()
    assert alive(pids) == {} and marked(mark) == [] and our_cgroups() == []


async def test_a_terminal_kill_takes_everything_it_started(tmp_path: Path, mode: str, mark: str) -> None:
    spec = escaper(tmp_path)
    async with anyio.create_task_group() as tg:
        command = await Terminal.start(tg, spec.argv, tmp_path, spec.env, None)
        pids = await escapees(tmp_path)
        command.kill()
        with anyio.fail_after(10):
            assert await command.wait() == (None, "SIGKILL")
    assert alive(pids) == {} and marked(mark) == [] and our_cgroups() == []


def test_the_supervisors_prctl_calls_the_kernel_without_the_ctypes_package() -> None:
    """supervisor._prctl calls prctl(2) through the C module alone (the ctypes package would cost
    the supervisor's start about 5 ms): as the supervisor runs (``-I -S``), a call the kernel
    refuses comes back as its errno, a subreaper set is real (an orphan of a child comes back to
    us, not to init), and ``ctypes`` itself was never imported."""
    code = (
        "import os, sys, time; sys.path.insert(0, os.path.dirname(sys.argv[1])); import supervisor\n"
        "try:\n    supervisor._prctl(12345, 1)\nexcept OSError as exc:\n    print('refused', exc.errno)\n"
        "supervisor._prctl(supervisor.PR_SET_CHILD_SUBREAPER, 1)\n"
        "if os.fork() == 0:\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(0.3); os._exit(0)\n"  # the grandchild, orphaned at once below
        "    os._exit(0)\n"
        "os.wait()\n"
        "try:\n    pid, _ = os.wait()\nexcept ChildProcessError:\n    pid = 0\n"  # ours only as subreaper
        "print('reaped orphan', pid > 0)\n"
        "print('ctypes', 'ctypes' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, supervisor.__file__],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["refused 22", "reaped orphan True", "ctypes False"], done.stdout
