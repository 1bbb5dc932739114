"""The supervisor forked by the early start (process/prestart.py's standby, ``_fork``): the same
promises as the one spawned as ``python -I -S`` (tests/test_supervisor_first*.py), shown on a fork.

A fork is only made by a process with one thread (pytest's may have more: anyio's worker threads),
so each case runs in a fresh python, the harness below, which checks that it did fork.  Every
would-be agent creates a marker file when it runs: its absence proves nothing was started."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrate.process import containment, prestart, supervisor
from orchestrate.process.spec import ProcessSpec

from .helpers import python_json
from .test_supervisor_first import BAD, FD_LISTER, _start_error

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux supervisor")

# One case per run (argv[1]), in a fresh process of one thread; prints a JSON object last.
HARNESS = r"""
import atexit, json, os, signal, sys, time
from orchestrate.process import prestart, supervisor
from orchestrate.process.spec import ProcessSpec

case, tmp = sys.argv[1], sys.argv[2]
marker = os.path.join(tmp, "started")
PATH = {"PATH": "/usr/bin:/bin"}
touch = ProcessSpec(["/bin/sh", "-c", f"touch {marker}; exec sleep 30"], tmp, PATH)
out = {"pid": os.getpid()}


def forked(**kwargs):
    waiting = prestart.standby(**kwargs)
    assert waiting is not None and waiting.popen.forked, "not forked"
    return waiting


def answer(sock):
    sock.setblocking(True)
    sock.settimeout(10)
    got = b""
    while not got.endswith(b"\n"):
        try:
            chunk = sock.recv(128)
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += chunk
    return got.decode()


def children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry))
    return found


def stem_in_cgroup(waiting):
    # The agent's process, forked by the supervisor at its start and in the cgroup before any
    # message: its pid, once it is in cgroup.procs (bounded wait).
    deadline = time.monotonic() + 10
    while True:
        procs = open(os.path.join(waiting.launch.cgroup, "cgroup.procs")).read().split()
        kids = children(waiting.popen.pid)
        if kids and str(kids[0]) in procs:
            return kids[0]
        assert time.monotonic() < deadline, "no stem in the cgroup"
        time.sleep(0.005)


if case == "send":  # argv[3]: the bytes to send (hex; "all"/"half": of the message that starts
    # `touch` in our cgroup), argv[4]: "eof" or "silence", argv[5:]: "no clone3" (refused, as by an
    # old kernel or a seccomp filter: the agent's process joins its cgroup itself)
    if sys.argv[5:] == ["no clone3"]:
        def refused(cgroup):
            raise OSError(38, "clone3 refused")
        supervisor._clone_into = refused
    waiting = forked(seconds=1.0)
    if waiting.launch.cgroup is not None:
        out["stem"] = stem_in_cgroup(waiting)  # before anything is sent
    ours = waiting.launch._ours
    ours.setblocking(True)
    data = sys.argv[3]
    if data in ("all", "half"):
        whole = supervisor.encode(touch.argv, None, touch.env, waiting.launch.cgroup)
        ours.sendall(whole if data == "all" else whole[: len(whole) // 2])
    else:
        ours.sendall(bytes.fromhex(data))
    if sys.argv[4] == "eof":
        ours.shutdown(2 - 1)  # SHUT_WR
    out["answer"] = answer(ours)
    if out["answer"].startswith("ok"):
        deadline = time.monotonic() + 10
        while not os.path.exists(marker) and time.monotonic() < deadline:  # (the agent runs)
            time.sleep(0.01)
        ours.sendall(b"kill\n")
    out["code"] = waiting.popen.wait(10)
    if "stem" in out:
        # Its agent if it was started (killed with it); else killed and reaped by the supervisor
        # itself, before it exited: in neither case left behind (nor its cgroup: below).
        out["stem left"] = os.path.exists(f"/proc/{out['stem']}")
        out["agent"] = out["answer"].split()[1] if out["answer"].startswith("ok") else None
    prestart._end(waiting.popen, waiting.launch)  # (discard() ends only a supervisor not reaped)
elif case == "fds":  # what the agent and its supervisor hold of ours
    keep, leak = os.pipe()
    os.set_inheritable(keep, True)  # careless: inheritable
    ours = {os.readlink(f"/proc/self/fd/{fd}") for fd in (keep, leak, 1, 2)}
    listing = os.path.join(tmp, "fds")
    lister = sys.argv[3]  # test_supervisor_first.FD_LISTER (this process must import no test module)
    waiting = forked()
    ours.add(os.readlink(f"/proc/self/fd/{waiting.launch._ours.fileno()}"))  # our end of its socket
    started = waiting.start(ProcessSpec([sys.executable, "-I", "-S", "-c", lister, listing], tmp, PATH))
    deadline = time.monotonic() + 10
    while not (os.path.exists(listing) and open(listing).read()):
        assert time.monotonic() < deadline, "the agent never listed its fds"
        time.sleep(0.01)
    out["listed"] = open(listing).read()
    held = set()
    for fd in os.listdir(f"/proc/{started.popen.pid}/fd"):
        try:
            held.add(os.readlink(f"/proc/{started.popen.pid}/fd/{fd}"))
        except OSError:
            pass
    out["held"] = sorted(held & ours)
    out["cmdline"] = open(f"/proc/{started.popen.pid}/cmdline", "rb").read().decode()
    started.discard()
    out["code"] = started.popen.returncode
elif case == "name":  # what ps lists it as, and us, once it has started its agent
    waiting = forked()
    ours = {"comm": open("/proc/self/comm").read(), "cmdline": open("/proc/self/cmdline", "rb").read()}
    out["before"] = open(f"/proc/{waiting.popen.pid}/comm").read()  # (renamed later: a fork of ours)
    started = waiting.start(touch)
    out["answer"] = answer(started.launch._ours)
    pid = started.popen.pid
    theirs = {"comm": open(f"/proc/{pid}/comm").read(), "cmdline": open(f"/proc/{pid}/cmdline", "rb").read()}
    out["ours"] = {k: v if isinstance(v, str) else v.decode() for k, v in ours.items()}
    out["theirs"] = {k: v if isinstance(v, str) else v.decode() for k, v in theirs.items()}
    out["still ours"] = open("/proc/self/comm").read() == ours["comm"]
    out["still our cmdline"] = open("/proc/self/cmdline", "rb").read() == ours["cmdline"]
    started.discard()
elif case == "signals":  # SIGTERM at once, before the supervisor can have caught it
    waiting = forked()
    for _ in range(50):
        os.kill(waiting.popen.pid, signal.SIGTERM)
    started = waiting.start(touch)
    out["answer"] = answer(started.launch._ours)  # "ok": the supervisor lived to start the agent
    out["code"] = started.popen.wait(10)
    started.discard()
elif case == "exit":  # it never runs our atexit handlers nor flushes our buffers
    atexit.register(lambda: open(os.path.join(tmp, "atexit"), "a").write(f"{os.getpid()}\n"))
    sys.stdout.write("BUFFERED ")  # not flushed: a pipe, without PYTHONUNBUFFERED
    ran = forked().start(ProcessSpec(["/bin/sh", "-c", f"touch {marker}"], tmp, PATH))
    out["ran"] = ran.popen.wait(10)
    idle = forked()
    idle.discard()
    out["idle"] = idle.popen.returncode
    supervisor._receive = lambda ctl, seconds: 1 // 0  # the supervisor's own code fails
    broken = forked()
    out["broken"] = broken.popen.wait(10)
    out["said"] = broken.popen.stderr.read().decode()
    prestart._end(broken.popen, broken.launch)
elif case == "threads":  # another thread: no fork, a python of its own (and it works)
    import threading
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    waiting = prestart.standby()
    out["forked"] = waiting.popen.forked
    out["args"] = waiting.popen.args
    started = waiting.start(touch)
    out["answer"] = answer(started.launch._ours)
    started.discard()
    stop.set()
    thread.join()
elif case == "error":  # argv[3]: a JSON spec [argv, cwd, env]: the SpawnError an adopting run gets
    argv, cwd, env = json.loads(sys.argv[3])
    started = forked().start(ProcessSpec(argv, cwd, env))
    import anyio
    from orchestrate.errors import SpawnError
    from orchestrate.process.pipes import AgentProcess

    async def adopt():
        try:
            await AgentProcess.adopt(started)
        except SpawnError as exc:
            return str(exc)
        return "no error"

    out["said"] = anyio.run(adopt)
    out["code"] = started.popen.returncode
print("\n" + json.dumps(out), flush=True)
"""


def harness(case: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    result, stdout = python_json(HARNESS, case, str(tmp_path), *args)
    result["stdout"] = stdout
    parent = containment._find_our_cgroup()
    if parent is not None:  # the harness's cgroups (named by its pid) are all gone
        assert list(Path(parent).glob(f"orchestrate-{result['pid']}-*")) == []
    return result


def stem_gone(got: dict[str, Any]) -> bool:
    """Where there are cgroups, the agent's process was in the cgroup before the message was sent,
    and it is gone now (the harness checks its cgroups are gone too)."""
    if containment._find_our_cgroup() is None or os.environ.get("ORCHESTRATE_CGROUPS") == "0":
        return True
    return "stem" in got and got["stem left"] is False


def nothing_ran(tmp_path: Path) -> bool:
    time.sleep(0.2)  # an agent started by mistake would have touched its marker by now
    return not (tmp_path / "started").exists()


def _touch(tmp_path: Path) -> list[str]:
    return ["/bin/sh", "-c", f"touch {shlex.quote(str(tmp_path / 'started'))}; exec sleep 30"]


@pytest.mark.parametrize(
    "case", ["garbage", "wrong magic", "a byte past the body", "a huge count", "another cgroup"]
)
def test_a_bad_message_to_a_forked_supervisor_starts_nothing(tmp_path: Path, case: str) -> None:
    """Bad messages, and a good one naming no cgroup where the supervisor's agent process is in
    one already (forked knowing it: the message must say the same)."""
    if case == "another cgroup" and containment._find_our_cgroup() is None:
        pytest.skip("no cgroup here: any cgroup named is another")
    if case == "another cgroup":
        data = supervisor.encode(_touch(tmp_path), None, {"PATH": "/usr/bin:/bin"}, None)
    else:
        data = BAD[case](tmp_path / "started")  # type: ignore[operator]
    got = harness("send", tmp_path, data.hex(), "silence")
    assert (got["code"], got["answer"]) == (supervisor.NOTHING_STARTED, "")
    assert nothing_ran(tmp_path) and stem_gone(got)


@pytest.mark.parametrize("then", ["eof", "silence"])
def test_a_short_message_or_none_to_a_forked_supervisor_starts_nothing(tmp_path: Path, then: str) -> None:
    """Half a message, then end of file (at once) or silence (its 1 s deadline); and nothing at
    all until the deadline."""
    for data in ("half", ""):
        began = time.monotonic()
        got = harness("send", tmp_path, data, then)
        assert (got["code"], got["answer"]) == (supervisor.NOTHING_STARTED, "")
        assert time.monotonic() - began < 8.0 and stem_gone(got)
    assert nothing_ran(tmp_path)


@pytest.mark.parametrize("clone3", ["clone3", "no clone3"])
def test_a_good_message_to_a_forked_supervisor_starts_the_agent(tmp_path: Path, clone3: str) -> None:
    """The control for the cases above; the agent's process born in its cgroup (clone3), or
    joining it (where clone3 is refused)."""
    got = harness("send", tmp_path, "all", "silence", clone3)
    assert got["answer"].startswith("ok ") and got["code"] == -signal.SIGKILL
    assert (tmp_path / "started").exists() and stem_gone(got)
    if "stem" in got:  # the process in the cgroup before the message is the agent's
        assert str(got["stem"]) == got["agent"]


def test_no_fd_of_ours_reaches_the_agent_or_its_forked_supervisor(tmp_path: Path) -> None:
    """A fork has every fd of ours, close-on-exec or not: the agent gets none (only 0, 1, 2), and
    the supervisor keeps none (our end of its socket included: our death is its end of file)."""
    got = harness("fds", tmp_path, FD_LISTER)
    assert got["listed"].split() == ["fds:"]
    assert got["held"] == []
    assert got["cmdline"] == "orchestrate supervisor\0"  # nothing of the agent's is on it
    assert got["code"] == -signal.SIGKILL


def test_a_forked_supervisor_is_named_for_what_it_is(tmp_path: Path) -> None:
    """ps listed the forked supervisor as a second ``orchestrate run ...`` (its command line and name
    were ours): once it has started its agent, its name (/proc/PID/comm, what ps -e and top show)
    and command line (ps -f, pgrep -f) are the supervisor's, and ours are untouched."""
    got = harness("name", tmp_path)
    assert got["answer"].startswith("ok ")
    assert got["before"] == got["ours"]["comm"]  # the control: a fork has our name at first
    assert got["theirs"]["comm"] != got["ours"]["comm"]
    assert got["theirs"]["comm"] == supervisor.NAME.decode() + "\n"
    assert got["theirs"]["cmdline"] == supervisor.TITLE.decode() + "\0"
    assert got["ours"]["cmdline"].startswith(sys.executable + "\0-c\0")
    assert got["still ours"] and got["still our cmdline"]


def test_signals_sent_to_a_forked_supervisor_at_once_reach_the_agent(tmp_path: Path) -> None:
    """SIGTERM sent right after the fork, before the supervisor's handlers can be in place (its
    signals are blocked across the fork): it neither kills the supervisor nor is lost: the agent
    dies of it once it runs."""
    got = harness("signals", tmp_path)
    assert got["answer"].startswith("ok ") and got["code"] == -signal.SIGTERM


def test_a_forked_supervisor_never_returns_into_our_code(tmp_path: Path) -> None:
    """Whether its agent ran, it was told nothing, or its own code failed: it ends by os._exit,
    never running our atexit handlers nor flushing our buffered output a second time."""
    got = harness("exit", tmp_path)
    assert (got["ran"], got["idle"]) == (0, supervisor.NOTHING_STARTED)
    assert got["broken"] == 1 and "the supervisor failed: ZeroDivisionError" in got["said"]
    assert got["stdout"].count("BUFFERED") == 1
    assert (tmp_path / "atexit").read_text().split() == [str(got["pid"])]


def test_a_process_with_threads_spawns_its_supervisor(tmp_path: Path) -> None:
    got = harness("threads", tmp_path)
    assert got["forked"] is False and any(a.endswith("supervisor.py") for a in got["args"])
    assert got["answer"].startswith("ok ")


@pytest.mark.parametrize(
    ("argv", "where", "why"),
    [
        (["/bin/true"], "gone", "does not exist or is not a directory"),
        (["no-such-program-for-orchestrate"], ".", "No such file or directory"),
    ],
)
def test_start_failures_say_the_same_forked(tmp_path: Path, argv: list[str], where: str, why: str) -> None:
    cwd = str(tmp_path / where)
    got = harness("error", tmp_path, json.dumps([argv, cwd, {"PATH": "/usr/bin:/bin"}]))
    assert why in got["said"]
    assert got["said"] == _start_error(ProcessSpec(argv, cwd, {"PATH": "/usr/bin:/bin"}), "spawn")
    assert got["code"] == 127


@pytest.mark.parametrize("fork", [True, False])
def test_a_message_larger_than_a_pipe_reaches_the_agent_whole(tmp_path: Path, fork: bool) -> None:
    """The body goes on from the supervisor to the agent's process over a pipe (64 KiB): ~1 MiB
    of environment arrives whole, in order, either way the supervisor was started."""
    env = {"PATH": "/usr/bin:/bin", **{f"BIG{i}": f"{i}" * 100_000 for i in range(10)}}
    script = 'for i in 0 1 2 3 4 5 6 7 8 9; do eval "printf %s \\"\\$BIG$i\\"" | wc -c; done'
    started = prestart.prestart(ProcessSpec(["/bin/sh", "-c", script], tmp_path, env), fork=fork)
    assert started is not None
    try:
        assert started.popen.stdout is not None
        out = started.popen.stdout.read().split()
        assert started.popen.wait(10) == 0
    finally:
        started.discard()
    assert out == [b"100000"] * 10
