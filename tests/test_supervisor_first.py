"""The supervisor spawned first (process/prestart.py's standby, cli/early.py): it is told what to
start over its control socket, in one length-prefixed message read under a deadline; anything else
and it exits 125 having started nothing.  Every would-be agent here creates a marker file when it
runs: its absence proves nothing was started."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrate.errors import SpawnError
from orchestrate.process import containment, prestart, supervisor
from orchestrate.process.pipes import AgentProcess
from orchestrate.process.spec import ProcessSpec

from . import test_containment as contained
from .helpers import ROOT, marked, pid_alive
from .test_containment import FAST, escapees, escaper, our_cgroups, settle

mode = contained.mode  # each mechanism the machine offers
mark = contained.mark

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux supervisor")

PATH = {"PATH": "/usr/bin:/bin"}


def touch(marker: Path) -> list[str]:
    """An agent that creates ``marker`` and then waits (so a test can see it run)."""
    return ["/bin/sh", "-c", f"touch {shlex.quote(str(marker))}; exec sleep 30"]


def message(marker: Path) -> bytes:
    return supervisor.encode(touch(marker), None, PATH, None)


class Spawned:
    """Supervisors a test spawned by hand, and our ends of their sockets."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.sockets: list[socket.socket] = []


@pytest.fixture
def spawned() -> Iterator[Spawned]:
    """Closed after the test; a supervisor left running is killed (with its agent)."""
    made = Spawned()
    yield made
    for ours in made.sockets:
        ours.close()
    for proc in made.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def supervise(
    made: Spawned, seconds: float = 10.0, cwd: Path | None = None
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """A supervisor as the early start spawns it (its command line, a socket pair), waiting at most
    ``seconds`` for its message (in ``cwd``, else ours)."""
    ours, theirs = socket.socketpair()
    argv = [*supervisor.command(sys.executable, containment.SUPERVISOR, theirs.fileno()), str(seconds)]
    proc = subprocess.Popen(
        argv,
        pass_fds=(theirs.fileno(),),
        cwd=cwd,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    theirs.close()
    made.procs.append(proc)
    made.sockets.append(ours)
    return proc, ours


def answer(ours: socket.socket, seconds: float = 10.0) -> bytes:
    """What the supervisor said, up to its first line or its end."""
    ours.settimeout(seconds)
    got = b""
    while not got.endswith(b"\n"):
        try:
            chunk = ours.recv(128)
        except ConnectionResetError:  # it closed with our bytes unread: nothing said either
            break
        if not chunk:
            break
        got += chunk
    return got


def started_nothing(proc: subprocess.Popen[bytes], ours: socket.socket, marker: Path) -> None:
    assert proc.wait(10) == supervisor.NOTHING_STARTED
    assert answer(ours) == b""  # no "ok", no "err": it said nothing and closed
    time.sleep(0.2)  # an agent started by mistake would have touched its marker by now
    assert not marker.exists()


# --- the message, read by the supervisor ---------------------------------------------------------


def _header(length: int, magic: bytes = supervisor.MAGIC) -> bytes:
    return magic + length.to_bytes(4, "big")


def _body(*fields: bytes) -> bytes:
    body = b"\0".join(fields)
    return _header(len(body)) + body


BAD: dict[str, object] = {
    "garbage": lambda m: b"hello, supervisor\nkill\n" * 4,
    "wrong magic": lambda m: b"orchsup2" + message(m)[8:],
    "oversized length": lambda m: _header(supervisor.MAX_MESSAGE + 1) + message(m)[12:],
    "largest length": lambda m: _header(0xFFFFFFFF),
    "empty body": lambda m: _header(0),
    "two messages": lambda m: message(m) + message(m),
    "a byte past the body": lambda m: message(m) + b"x",
    "a command past the body": lambda m: message(m) + b"signal 15\n",
    "no arguments": lambda m: _body(b"", b"", b"0", b"-"),
    "an empty program": lambda m: _body(b"", b"", b"1", b"-", b""),
    "too few arguments": lambda m: _body(b"", b"", b"3", b"-", b"/bin/sh", b"-c"),
    "too many fields": lambda m: _body(b"", b"", b"1", b"0", b"/bin/true", b"A=1"),
    "an entry without =": lambda m: _body(b"", b"", b"1", b"1", b"/bin/true", b"NOEQUALS"),
    "an entry without a name": lambda m: _body(b"", b"", b"1", b"1", b"/bin/true", b"=1"),
    "a count that is no number": lambda m: _body(b"", b"", b"x", b"-", b"/bin/true"),
    "a negative count": lambda m: _body(b"", b"", b"-1", b"-", b"/bin/true"),
    "a count of 5000 digits": lambda m: _body(b"", b"", b"1" * 5000, b"-", b"/bin/true"),
    "a huge count": lambda m: _body(b"", b"", b"1", b"9" * 9, b"/bin/true"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_message_starts_nothing(tmp_path: Path, spawned: Spawned, case: str) -> None:
    """Sent whole, with the socket left open: the supervisor decides on what it read alone."""
    marker = tmp_path / "started"
    proc, ours = supervise(spawned)
    ours.sendall(BAD[case](marker))  # type: ignore[operator]
    started_nothing(proc, ours, marker)


@pytest.mark.parametrize(
    "cut", ["nothing", "half the header", "the header alone", "half the body", "all but a byte"]
)
@pytest.mark.parametrize("then", ["end of file", "silence"])
def test_a_short_message_starts_nothing(tmp_path: Path, spawned: Spawned, cut: str, then: str) -> None:
    """Cut short, then the writer gone (end of file: exits at once) or silent (exits at its
    deadline, 1 s here)."""
    marker = tmp_path / "started"
    whole = message(marker)
    size = {"nothing": 0, "half the header": 6, "the header alone": 12}.get(cut)
    if size is None:
        size = 12 + (len(whole) - 12) // 2 if cut == "half the body" else len(whole) - 1
    proc, ours = supervise(spawned, seconds=1.0)
    began = time.monotonic()
    ours.sendall(whole[:size])
    if then == "end of file":
        ours.shutdown(socket.SHUT_WR)
    started_nothing(proc, ours, marker)
    assert time.monotonic() - began < 8.0


def test_a_writer_gone_right_after_the_message_starts_nothing(tmp_path: Path, spawned: Spawned) -> None:
    """The message whole, then end of file before the supervisor has read it (it is still starting
    its interpreter): nobody is left to adopt the agent, so it is not started."""
    marker = tmp_path / "started"
    proc, ours = supervise(spawned)
    ours.sendall(message(marker))
    ours.shutdown(socket.SHUT_WR)
    started_nothing(proc, ours, marker)


def test_a_slow_writer_within_the_deadline_is_heard(tmp_path: Path, spawned: Spawned) -> None:
    marker = tmp_path / "started"
    proc, ours = supervise(spawned, seconds=5.0)
    whole = message(marker)
    for i in range(0, len(whole), 7):  # a piece every 20 ms: about half a second in all
        ours.sendall(whole[i : i + 7])
        time.sleep(0.02)
    words = answer(ours).split()
    assert words[0] == b"ok", words
    wait_file_exists(marker)  # (the agent ran)
    ours.close()  # end of file: the supervisor kills the agent and exits as it did
    assert proc.wait(10) == -signal.SIGKILL
    assert not pid_alive(int(words[1]))


def test_a_slow_writer_past_the_deadline_starts_nothing(tmp_path: Path, spawned: Spawned) -> None:
    """A byte every 50 ms never gets the message in within 1 s: the deadline is from its start,
    not from the last byte, so trickling does not keep it waiting."""
    marker = tmp_path / "started"
    proc, ours = supervise(spawned, seconds=1.0)
    whole = message(marker)
    began = time.monotonic()
    with pytest.raises(OSError):  # EPIPE once it has gone
        for byte in whole:
            ours.send(bytes([byte]), socket.MSG_NOSIGNAL)
            time.sleep(0.05)
    assert time.monotonic() - began < 4.0
    started_nothing(proc, ours, marker)


def test_a_good_message_starts_the_agent(tmp_path: Path, spawned: Spawned) -> None:
    """The control for the cases above: the same message, alone, starts the agent."""
    marker = tmp_path / "started"
    proc, ours = supervise(spawned)
    ours.sendall(message(marker))
    assert answer(ours).startswith(b"ok ")
    wait_file_exists(marker)  # (the agent ran)
    ours.sendall(b"kill\n")
    assert proc.wait(10) == -signal.SIGKILL


def test_a_body_as_long_as_a_header_is_a_body(tmp_path: Path, spawned: Spawned) -> None:
    """A body of exactly 12 bytes (the header's length) was read as a second header once whole: a
    good message (``./a.sh``, the environment kept) started nothing."""
    marker = tmp_path / "started"
    (tmp_path / "a.sh").write_text(f"#!/bin/sh\ntouch {shlex.quote(str(marker))}\nexec sleep 30\n")
    (tmp_path / "a.sh").chmod(0o755)
    whole = _body(b"", b"", b"1", b"-", b"./a.sh")  # (in the supervisor's directory: tmp_path)
    assert len(whole) == 2 * supervisor._HEADER  # the control: the length in question
    proc, ours = supervise(spawned, cwd=tmp_path)
    ours.sendall(whole)
    assert answer(ours).startswith(b"ok ")
    wait_file_exists(marker)
    ours.sendall(b"kill\n")
    assert proc.wait(10) == -signal.SIGKILL


@pytest.mark.parametrize("number", [b"99999999999", b"9" * 5000], ids=["out of range", "5000 digits"])
def test_a_command_with_an_absurd_number_is_ignored(tmp_path: Path, spawned: Spawned, number: bytes) -> None:
    """``signal N`` whose N no kill() takes (OverflowError) or int() refuses (ValueError, over 4300
    digits) raised out of the supervisor: it died (exit 1) and its agent with it, unsignalled.  It is
    ignored as any command that does not parse; the next one is obeyed."""
    marker = tmp_path / "started"
    proc, ours = supervise(spawned)
    ours.sendall(message(marker))
    assert answer(ours).startswith(b"ok ")
    wait_file_exists(marker)
    ours.sendall(b"signal " + number + b"\ngroup " + number + b"\nsignal 15\n")
    assert proc.wait(10) == -signal.SIGTERM  # as its agent ended: by the SIGTERM sent last


def test_a_body_that_looks_like_a_header_is_not_one(tmp_path: Path, spawned: Spawned) -> None:
    """A 12-byte body that is a header, then a whole message: the supervisor read the second
    message as its orders and started it (a byte past the body must start nothing)."""
    marker = tmp_path / "started"
    second = message(marker)
    proc, ours = supervise(spawned)
    ours.sendall(_header(supervisor._HEADER) + second)
    started_nothing(proc, ours, marker)


_FIELD = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(
    argv=st.lists(_FIELD, min_size=1, max_size=5).filter(lambda a: bool(a[0])),
    env=st.none() | st.dictionaries(_FIELD.filter(lambda k: bool(k) and "=" not in k), _FIELD, max_size=5),
    cwd=st.none() | _FIELD.filter(bool),
    cgroup=st.none() | _FIELD.filter(bool),
)
def test_what_is_encoded_is_what_is_decoded(
    argv: list[str], env: dict[str, str] | None, cwd: str | None, cgroup: str | None
) -> None:
    data = supervisor.encode(argv, cwd, env, cgroup)
    assert data[:8] == supervisor.MAGIC and int.from_bytes(data[8:12], "big") == len(data) - 12
    got = supervisor.decode(data[12:])
    assert got is not None
    expected_env = None if env is None else {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
    assert got == ([os.fsencode(a) for a in argv], os.fsencode(cwd or ""), expected_env, cgroup)


@pytest.mark.parametrize(
    ("argv", "env", "why"),
    [
        (["/bin/sh", "a\0b"], {}, "embedded null byte"),
        (["/bin/sh"], {"A": "x\0y"}, "embedded null byte"),
        (["/bin/sh"], {"A=B": "1"}, "illegal environment variable name"),
        (["/bin/sh"], {"": "1"}, "illegal environment variable name"),
        ([""], {}, "no program"),
        ([], {}, "no program"),
        (["/bin/sh", "x" * (supervisor.MAX_MESSAGE + 1)], {}, "over"),
    ],
)
def test_what_no_exec_can_carry_is_refused_before_anything_is_spawned(
    argv: list[str], env: dict[str, str], why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        supervisor.encode(argv, None, env, None)
    # The run's own spawn says so as a SpawnError, having made no cgroup and spawned nothing.
    if argv:
        with pytest.raises(SpawnError, match=why):
            containment.prepare(argv) if not env else _address(argv, env)
    assert our_cgroups() == []


def _address(argv: list[str], env: dict[str, str]) -> None:
    launch = containment.prepare(None)
    try:
        launch.address(argv, None, env)
    finally:
        launch.abandon()


# --- our side killed, before, during and after the message --------------------------------------

# Starts a standby supervisor (forked or spawned, per argv[3]), tells it (per argv[1]) nothing, half
# its message, or all of it, says so on stdout, and waits to be killed.
OWNER = r"""
import sys
from pathlib import Path
from orchestrate.process.prestart import standby
from orchestrate.process.spec import ProcessSpec
how, marker = sys.argv[1], sys.argv[2]
waiting = standby(fork=sys.argv[3] == "fork")
print(waiting.popen.pid, waiting.popen.forked, flush=True)
spec = ProcessSpec(["/bin/sh", "-c", f"touch {marker}; exec sleep 30"], Path("/"), {"PATH": "/usr/bin:/bin"})
if how == "part":
    waiting.launch.address(spec.argv, str(spec.cwd), spec.env)
    waiting.launch._ours.setblocking(True)
    waiting.launch._ours.sendall(waiting.launch._message[:-3])
elif how == "all":
    import os, time
    assert waiting.start(spec) is not None
    deadline = time.monotonic() + 10
    while not os.path.exists(marker) and time.monotonic() < deadline:  # the agent runs
        time.sleep(0.01)
print("ready", flush=True)
sys.stdin.read()
"""

# Made a subreaper, runs OWNER, SIGKILLs it, and reaps the orphaned supervisor, which comes to it:
# prints the supervisor's exit code and whether it was forked.
GRANDPARENT = r"""
import ctypes, os, subprocess, sys
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    sys.exit("no subreaper")
argv = [sys.executable, "-c", sys.argv[1], *sys.argv[2:]]
owner = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
sup, forked = owner.stdout.readline().split()
assert owner.stdout.readline() == b"ready\n"
owner.kill()
owner.wait()
_, status = os.waitpid(int(sup), 0)
print(os.waitstatus_to_exitcode(status), forked.decode(), flush=True)
"""


@pytest.mark.parametrize("start", ["fork", "spawn"])
@pytest.mark.parametrize("how", ["none", "part"])
def test_our_side_killed_before_the_message_is_whole_starts_nothing(
    tmp_path: Path, how: str, start: str
) -> None:
    marker = tmp_path / "started"
    done = subprocess.run(
        [sys.executable, "-c", GRANDPARENT, OWNER, how, str(marker), start],
        capture_output=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    assert done.stdout.split() == [str(supervisor.NOTHING_STARTED).encode(), str(start == "fork").encode()]
    time.sleep(0.2)
    assert not marker.exists()


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_our_side_killed_after_the_message_kills_the_agent(tmp_path: Path, start: str) -> None:
    """The control: told everything, then orphaned: the agent ran, and died with the supervisor's
    kill (its exit code is the agent's: SIGKILL)."""
    marker = tmp_path / "started"
    done = subprocess.run(
        [sys.executable, "-c", GRANDPARENT, OWNER, "all", str(marker), start],
        capture_output=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    assert done.stdout.split() == [str(-signal.SIGKILL).encode(), str(start == "fork").encode()]
    assert marker.exists()


@pytest.mark.anyio
@pytest.mark.parametrize("start", ["fork", "spawn"])
async def test_an_escaped_grandchild_dies_with_a_standby_owner_killed_after_the_message(
    tmp_path: Path, mode: str, mark: str, start: str
) -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from orchestrate.process.prestart import standby\n"
        "from orchestrate.process.spec import ProcessSpec\n"
        f"waiting = standby(fork={start == 'fork'})\n"
        f"assert waiting.popen.forked is {start == 'fork'}\n"
        f"assert waiting.start(ProcessSpec({escaper(tmp_path).argv!r}, Path({str(tmp_path)!r}), "
        f"{escaper(tmp_path).env!r})) is not None\n"
        "sys.stdin.read()\n"
    )
    owner = await anyio.open_process([sys.executable, "-c", code], stdout=None, stderr=None)
    async with owner:
        try:
            pids = await escapees(tmp_path)
        finally:
            owner.kill()
    assert await settle(pids) == {}
    assert await settle({str(p): p for p in marked(mark)}) == {}


# --- what the agent gets, and what the supervisor shows --------------------------------------------

FD_LISTER = (
    "import os, sys\n"
    "fds = []\n"
    "for fd in range(3, 1024):\n"
    "    try:\n"
    "        os.fstat(fd)\n"
    "    except OSError:\n"
    "        continue\n"
    "    fds.append(fd)\n"
    "open(sys.argv[1], 'w').write(' '.join(['fds:', *map(str, fds)]))\n"
    "import time; time.sleep(30)\n"  # its supervisor lives on meanwhile, for us to look at
)


def wait_file(path: Path, seconds: float = 10.0) -> str:
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.01)
    return path.read_text()


@pytest.mark.parametrize("how", ["early", "spawn"])
def test_the_agent_inherits_no_fd_of_ours(tmp_path: Path, how: str) -> None:
    """Not the control socket, nor an fd we left inheritable: only its stdin, stdout and stderr."""
    out = tmp_path / "fds"
    spec = ProcessSpec([sys.executable, "-I", "-S", "-c", FD_LISTER, str(out)], tmp_path, PATH)
    leak_read, leak_write = os.pipe()
    os.set_inheritable(leak_read, True)  # a careless fd of ours
    leak = os.readlink(f"/proc/self/fd/{leak_read}")
    try:
        if how == "early":
            started = prestart.prestart(spec)
            assert started is not None
            try:
                listed = wait_file(out)
                held = supervisor_fds(started.popen.pid)
            finally:
                started.discard()
        else:

            async def spawn() -> tuple[str, list[str]]:
                proc = await AgentProcess.spawn(spec)
                try:
                    return wait_file(out), supervisor_fds(proc.process.pid)
                finally:
                    await proc.shutdown(FAST)

            listed, held = anyio.run(spawn)
    finally:
        os.close(leak_read)
        os.close(leak_write)
    assert listed.split() == ["fds:"]
    assert held and leak not in held  # nor does the supervisor keep it (our pipe's end open)


def supervisor_fds(pid: int) -> list[str]:
    """What the fds of ``pid`` point at."""
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found.append(os.readlink(fd))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("how", ["early", "spawn"])
def test_no_secret_is_on_the_supervisors_command_line(tmp_path: Path, how: str) -> None:
    """``/proc/PID/cmdline`` is world-readable: the agent's arguments and environment go over the
    socket.  (Its environment is readable by our user alone, as ours is.)"""
    token = f"tok-{os.getpid()}-{time.monotonic_ns()}"
    marker = tmp_path / "started"
    argv = ["/bin/sh", "-c", f"touch {marker}; exec sleep 30", f"arg-{token}"]
    spec = ProcessSpec(argv, tmp_path, {**PATH, "SECRET_TOKEN": f"env-{token}"})

    def shown(pid: int) -> tuple[bytes, bytes]:
        return Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/environ").read_bytes()

    if how == "early":
        waiting = prestart.standby(fork=False)  # forked, its command line is ours: test_supervisor_fork.py
        assert waiting is not None
        before = shown(waiting.popen.pid)
        started = waiting.start(spec)
        assert started is not None
        try:
            wait_file_exists(marker)
            cmdline, environ = shown(started.popen.pid)
        finally:
            started.discard()
        assert token.encode() not in before[0] and token.encode() not in before[1]
        assert token.encode() not in environ  # the spec's environment is the agent's alone
    else:

        async def spawn() -> bytes:
            proc = await AgentProcess.spawn(spec)
            try:
                wait_file_exists(marker)
                return shown(proc.process.pid)[0]
            finally:
                await proc.shutdown(FAST)

        cmdline = anyio.run(spawn)
    assert b"supervisor.py" in cmdline  # it is the supervisor's
    assert token.encode() not in cmdline


def wait_file_exists(path: Path, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never made"
        time.sleep(0.01)


# --- how the agent is started: PATH, directory, failures --------------------------------------------


def _start_error(spec: ProcessSpec, how: str) -> str:
    async def early() -> str:
        started = prestart.prestart(spec)
        assert started is not None
        with pytest.raises(SpawnError) as caught:
            await AgentProcess.adopt(started)
        assert started.popen.returncode is not None  # the supervisor, reaped
        return str(caught.value)

    async def spawn() -> str:
        with pytest.raises(SpawnError) as caught:
            await AgentProcess.spawn(spec)
        return str(caught.value)

    return anyio.run(early if how == "early" else spawn)


def test_a_missing_directory_is_the_same_error_either_way(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    spec = ProcessSpec(["/bin/true"], gone, PATH)
    early, spawned = _start_error(spec, "early"), _start_error(spec, "spawn")
    assert early == spawned and "does not exist or is not a directory" in early


def test_a_missing_program_is_the_same_error_either_way(tmp_path: Path) -> None:
    spec = ProcessSpec(["no-such-program-for-orchestrate"], tmp_path, PATH)
    early, spawned = _start_error(spec, "early"), _start_error(spec, "spawn")
    assert early == spawned and "No such file or directory" in early


def test_the_program_is_found_on_the_agents_path_not_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """execvpe: the PATH of the agent's environment, as execvp did when that environment was the
    supervisor's own; and a relative program from the agent's directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "ran"
    program = bin_dir / "orchestrate-test-agent"
    program.write_text(f'#!/bin/sh\necho "$PWD" > {shlex.quote(str(marker))}\n')
    program.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # ours has no bin_dir
    work = tmp_path / "work"
    work.mkdir()
    for argv, env in (
        (["orchestrate-test-agent"], {"PATH": str(bin_dir)}),
        (["../bin/orchestrate-test-agent"], PATH),
    ):
        marker.unlink(missing_ok=True)
        started = prestart.prestart(ProcessSpec(argv, work, env))
        assert started is not None
        try:
            assert wait_file(marker).strip() == str(work)
        finally:
            started.discard()
    # Not found on our PATH when the agent's has no such program.
    assert "No such file" in _start_error(ProcessSpec(["orchestrate-test-agent"], work, PATH), "early")


def test_a_standby_told_nothing_exits_having_started_nothing() -> None:
    waiting = prestart.standby()
    assert waiting is not None
    began = time.monotonic()
    waiting.discard()
    assert waiting.popen.returncode == supervisor.NOTHING_STARTED
    assert time.monotonic() - began < 5.0
    with pytest.raises(RuntimeError):
        waiting.start(ProcessSpec(["/bin/true"], Path("/"), PATH))


def test_a_standby_given_what_no_exec_carries_starts_nothing(tmp_path: Path) -> None:
    waiting = prestart.standby()
    assert waiting is not None
    assert waiting.start(ProcessSpec(["/bin/true", "a\0b"], tmp_path, PATH)) is None
    assert waiting.popen.returncode == supervisor.NOTHING_STARTED


def test_a_standby_near_its_deadline_is_not_told_but_ended(tmp_path: Path) -> None:
    """Past half the supervisor's wait it might stop waiting while the message is on its way: the
    early start ends it instead (the run then starts its own agent)."""
    marker = tmp_path / "started"
    waiting = prestart.standby()
    assert waiting is not None
    waiting._spawned -= supervisor.MESSAGE_SECONDS  # as if our imports had taken that long
    assert waiting.start(ProcessSpec(touch(marker), tmp_path, PATH)) is None
    assert waiting.popen.returncode == supervisor.NOTHING_STARTED
    time.sleep(0.2)
    assert not marker.exists()


def _catching(pid: int, sig: int) -> None:
    """Wait until the supervisor has its handler for ``sig`` in place (a fixed sleep is not
    enough on a loaded machine: its interpreter may not be up yet)."""
    deadline = time.monotonic() + 10
    while True:
        status = Path(f"/proc/{pid}/status").read_text()
        if int(status.split("SigCgt:")[1].split()[0], 16) & (1 << (sig - 1)):
            return
        assert time.monotonic() < deadline, "the supervisor never caught the signal"
        time.sleep(0.01)


def test_signals_before_the_message_reach_the_agent_once_it_runs(tmp_path: Path, spawned: Spawned) -> None:
    """SIGTERM (a flood of it) sent to a supervisor still waiting for its message is forwarded to
    the agent once started, as before the agent existed: it dies of it."""
    marker = tmp_path / "started"
    proc, ours = supervise(spawned)
    _catching(proc.pid, signal.SIGTERM)  # (before, SIGTERM would end the supervisor itself)
    for _ in range(200):
        proc.send_signal(signal.SIGTERM)
    ours.sendall(message(marker))
    assert answer(ours).startswith(b"ok ")
    assert proc.wait(10) == -signal.SIGTERM  # the agent's own death, passed on


def test_the_boot_line_appends_the_supervisors_directory(tmp_path: Path) -> None:
    """The supervisor is imported from its directory (so from its cached bytecode), appended to
    the path: a module of ours named like one of the standard library's (process/pty.py) never
    shadows it.  Shown with a stand-in supervisor.py next to a hostile select.py."""
    (tmp_path / "select.py").write_text("raise SystemExit('the shadow was imported')\n")
    (tmp_path / "supervisor.py").write_text(
        "import select, sys\n"
        "def main(args):\n"
        "    print(select.__file__ or 'builtin', __file__, args, sys.path[-1], flush=True)\n"
    )
    done = subprocess.run(
        supervisor.command(sys.executable, str(tmp_path / "supervisor.py"), 7),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    select_file, imported, args, last = done.stdout.split(" ", 3)
    assert select_file != str(tmp_path / "select.py")
    assert imported == str(tmp_path / "supervisor.py") and args == "['7']" and last.strip() == str(tmp_path)
    assert (tmp_path / "__pycache__").is_dir()  # compiled once, read from bytecode after


def test_no_early_spawn_when_standard_fds_of_ours_are_closed(tmp_path: Path) -> None:
    """With our 0, 1 and 2 closed the socket and the pipes take those numbers, and the spawn's
    dup2s would clobber them in the child: no standby then (the run spawns its agent its own way),
    and nothing is left open."""
    out = tmp_path / "out"
    code = (
        "import os, sys\n"
        "from orchestrate.process import prestart\n"
        "for fd in (0, 1, 2):\n"
        "    os.close(fd)\n"
        "before = sorted(os.listdir('/proc/self/fd'))\n"
        "made = prestart.standby()\n"
        "after = sorted(os.listdir('/proc/self/fd'))\n"
        "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)\n"
        "os.write(fd, f'{made is None} {before == after}'.encode())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        capture_output=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert out.exists(), done.stderr
    assert out.read_text().split() == ["True", "True"]


def test_a_standby_killed_before_the_message_is_not_used(tmp_path: Path) -> None:
    """Its supervisor SIGKILLed while it waits (by the agent's user, say): the message finds no
    reader, the early start ends it and the run starts its own agent."""
    marker = tmp_path / "started"
    waiting = prestart.standby()
    assert waiting is not None
    os.kill(waiting.popen.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while waiting.popen.poll() is None:  # reaped here: its socket end is closed for sure
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert waiting.start(ProcessSpec(touch(marker), tmp_path, PATH)) is None
    assert waiting.popen.returncode == -signal.SIGKILL
    time.sleep(0.2)
    assert not marker.exists()
