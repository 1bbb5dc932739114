"""``orchestrate warm`` under review (cli/warm.py, cli/warm_server.py): what a hostile peer, a slow
server, a person at a terminal, a container or the server's own start could do to the promises the
two modules make (tests/test_warm.py holds the plain cases; the helpers are its own).

Each test here failed on the code before the fix it names: a command that gave up waiting was run a
second time behind its back; a silent connection held up every other command; a flood of them ran
the server out of descriptors, which ended it; ``preload`` ran the command line it was started with
again; a run killed by SIGKILL left its command a traceback; a stop told a command whose run never
started that it died of SIGTERM; Ctrl-Z left the run going; the server's own inherited descriptors
were the run's; the run escaped its command's cgroup; a socket of another user was sent the
environment; a command in a container was run outside it; and the run wrote in the server's encoding
and kept time in the server's zone."""

from __future__ import annotations

import contextlib
import marshal
import os
import pwd
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrate.cli import warm_request
from orchestrate.process import containment

from .helpers import FAKE_ACP, ROOT, pid_alive
from .test_warm import (
    WAIT,
    Warm,
    command,
    environment,
    good_request,
    hanging,
    send,
    start_server,
    stop_server,
    wait_for,
    where,
    where_from_proc,
)


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[Warm]:
    server = start_server(tmp_path / "warm")
    yield server
    stop_server(server)


def results(stdout: str) -> int:
    """How many runs wrote to this stdout (a result line each)."""
    return sum(1 for line in stdout.splitlines() if line.startswith('{"type":"result"'))


def state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


# --- a command that went cold is never also run warm ----------------------------------------------


def test_a_command_that_gave_up_waiting_is_not_run_again_behind_its_back(warm: Warm, tmp_path: Path) -> None:
    # The server is too slow to answer (stopped here: a loaded machine, a long fingerprint walk):
    # the command stops waiting and runs cold.  When the server comes to its request, that run
    # must not start again, warm, with the same prompt, on the same stdout.
    warm.proc.send_signal(signal.SIGSTOP)
    try:
        proc = subprocess.Popen(
            command("where text=1"), env=environment(warm, tmp_path), cwd=tmp_path, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        proc.wait(90)  # (its stdout stays open: the server holds it, in the request not yet read)
    finally:
        warm.proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=90)  # until every copy of its stdout is closed
    assert proc.returncode == 0, err
    assert where(out)["up"][2] != warm.proc.pid  # cold
    assert results(out) == 1, out  # and only cold
    assert warm.proc.poll() is None


def test_a_connection_that_sends_nothing_holds_up_no_other_command(warm: Warm, tmp_path: Path) -> None:
    # Connected and silent (a command stopped or stuck before its request, or anything else of
    # ours): the server waits for each one's request, but not before serving the others.
    silent = []
    for _ in range(4):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(str(warm.socket))
        silent.append(conn)
    try:
        done = subprocess.run(
            command("where text=1"), env=environment(warm, tmp_path), cwd=tmp_path, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
    finally:
        for conn in silent:
            conn.close()
    assert done.returncode == 0, done.stderr
    assert results(done.stdout) == 1, done.stdout
    assert where(done.stdout)["up"][2] == warm.proc.pid  # warm, not cold after a wait
    assert warm.runs() == 1


def test_a_run_killed_by_sigkill_kills_its_command_so(warm: Warm, tmp_path: Path) -> None:
    # The OOM killer, `kill -9` of the run: a cold command is the run, and dies of SIGKILL.  The
    # warm command set SIGKILL's handler to die of it too, which the kernel refuses: a traceback
    # and exit code 1.
    proc, agent, run_pid = hanging(warm, tmp_path)
    os.kill(run_pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == -signal.SIGKILL, err
    assert "Traceback" not in err
    wait_for(lambda: not pid_alive(agent), "the agent ends with its run")


def test_a_stop_ends_a_run_not_let_go_without_a_status(warm: Warm) -> None:
    # Stopped between its answer ("p") and the command's go, the server ended the child that never
    # ran with SIGTERM and told the command it died of SIGTERM: the command then killed itself so.
    # A child that never ran says nothing: the command finds its end closed and runs cold.
    fds = [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            conn.settimeout(WAIT)
            conn.connect(str(warm.socket))
            ints = b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds)
            request = marshal.dumps(good_request(["run", "--help"], {"PATH": os.environ["PATH"]}))
            conn.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, ints)])
            assert conn.recv(64)[:1] == b"p"  # and no go
            warm.proc.send_signal(signal.SIGTERM)
            assert conn.recv(64) == b""
    finally:
        for fd in fds:
            os.close(fd)
    assert warm.proc.wait(WAIT) == 0


# --- the server's start ------------------------------------------------------------------------------


def test_preload_does_not_run_the_command_line_again(tmp_path: Path) -> None:
    # preload imports every module of the package; orchestrate/__main__.py is the command itself,
    # and importing it ran `orchestrate ARGS...` with the server's own arguments (a second server,
    # nested in the first one's import).  Here ARGS is --version: it would print it and exit.
    script = (
        "import sys\n"
        "sys.argv = ['orchestrate', '--version']\n"
        "from orchestrate.cli.warm_server import preload\n"
        "names = preload()\n"
        "print('preloaded', 'orchestrate.cli.main' in names)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path,
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "preloaded True\n"


def test_descriptors_the_server_inherited_are_not_the_runs(tmp_path: Path) -> None:
    # Whoever started the server may have left descriptors open in it (a pipe it waits on for EOF,
    # a log): a cold run has its command's, never those.
    read, write = os.pipe()
    try:
        os.set_inheritable(write, True)
        directory = tmp_path / "warm"
        server = _server_with(directory, pass_fds=[write])
        try:
            os.close(write)
            write = -1
            proc, agent, run_pid = hanging(server, tmp_path)
            try:
                mine = os.fstat(read)
                pipes = []
                for fd in os.listdir(f"/proc/{run_pid}/fd"):
                    try:
                        info = os.stat(f"/proc/{run_pid}/fd/{fd}")
                    except OSError:
                        continue
                    if (info.st_dev, info.st_ino) == (mine.st_dev, mine.st_ino):
                        pipes.append(fd)
                assert pipes == []
            finally:
                proc.kill()
                proc.communicate(timeout=WAIT)
                wait_for(lambda: not pid_alive(agent), "the agent ends")
        finally:
            stop_server(server)
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)


def _server_with(directory: Path, **more: Any) -> Warm:
    """start_server, its process started with ``more`` (Popen's: descriptors left open in it, as
    a shell or a service manager may; limits)."""
    real = subprocess.Popen

    def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        return real(*args, **more, **kwargs)  # type: ignore[call-overload, no-any-return]

    subprocess.Popen = popen  # type: ignore[assignment, misc]
    try:
        return start_server(directory)
    finally:
        subprocess.Popen = real  # type: ignore[misc]


def test_a_server_out_of_descriptors_goes_on_and_serves_again(tmp_path: Path) -> None:
    # More connections at once than the server has descriptors for (a burst of commands, a loop
    # gone wrong): accept fails with EMFILE, which ended the server (and with it every run).
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def few() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, hard))

    server = _server_with(tmp_path / "warm", preexec_fn=few)
    try:
        silent = []
        try:
            for _ in range(60):
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                conn.settimeout(WAIT)
                conn.connect(str(server.socket))
                silent.append(conn)
            # Each is closed by the server at its deadline (accepted or not: ours wait for it).
            for conn in silent:
                assert conn.recv(64) == b""
        finally:
            for conn in silent:
                conn.close()
        assert server.proc.poll() is None, server.said()
        done = subprocess.run(
            command("where"), env=environment(server, tmp_path), cwd=tmp_path, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert where(done.stdout)["up"][2] == server.proc.pid
    finally:
        stop_server(server)


# --- the person at the terminal ----------------------------------------------------------------------


def test_ctrl_z_stops_the_run_and_fg_lets_it_go_on(warm: Warm, tmp_path: Path) -> None:
    # Ctrl-Z stops the terminal's foreground group: a cold run is in it, and stops (it neither
    # prints over the shell nor asks on its terminal while the shell reads it).  A warm run is in
    # another session: the command stops it.  (process_group: a group of its own, as a shell's job;
    # not orphaned, so SIGTSTP stops it.)
    pid_file = tmp_path / "agent.pid"
    proc = subprocess.Popen(
        command("where hang"), env=environment(warm, tmp_path, FAKE_PID_FILE=str(pid_file)), cwd=tmp_path,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0,
    )  # fmt: skip
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text(), "the agent hangs")
        agent = int(pid_file.read_text())
        run_pid = where_from_proc(agent)[2]  # agent <- supervisor <- run
        assert f"run {run_pid}" in warm.said()
        os.killpg(proc.pid, signal.SIGTSTP)
        wait_for(lambda: state(proc.pid) == "T", "the command stops")
        wait_for(lambda: state(run_pid) == "T", "the run stops with it")
        os.killpg(proc.pid, signal.SIGCONT)  # fg
        wait_for(lambda: state(proc.pid) != "T" and state(run_pid) != "T", "both go on")
    finally:
        proc.kill()
        proc.wait(WAIT)


def cgroup_of(pid: int) -> str:
    return next(
        line[3:].strip()
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        if line.startswith("0::")
    )


def test_the_run_and_its_agent_are_in_the_commands_cgroup(warm: Warm, tmp_path: Path) -> None:
    # `systemd-run --scope -p MemoryMax=2G orchestrate run ...`, a CI job's cgroup: limits and
    # accounting a cold run and its agent are under.  A warm run is the server's child: it must
    # not escape them into the server's cgroup.
    parent = containment._find_our_cgroup()
    if parent is None or os.environ.get("ORCHESTRATE_CGROUPS") == "0":
        pytest.skip("no writable cgroup v2 hierarchy")
    theirs = Path(parent) / f"warm-review-{os.getpid()}"
    try:
        theirs.mkdir()
    except OSError:
        pytest.skip("cannot make a cgroup here")
    try:
        pid_file = tmp_path / "agent.pid"

        def into_it() -> None:
            (theirs / "cgroup.procs").write_text("0")

        proc = subprocess.Popen(
            command("where hang"), env=environment(warm, tmp_path, FAKE_PID_FILE=str(pid_file)), cwd=tmp_path,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=into_it,
        )  # fmt: skip
        try:
            wait_for(lambda: pid_file.exists() and pid_file.read_text(), "the agent hangs")
            agent = int(pid_file.read_text())
            run_pid = where_from_proc(agent)[2]
            assert f"run {run_pid}" in warm.said()  # warm
            ours = cgroup_of(proc.pid)
            assert cgroup_of(run_pid) == ours
            assert cgroup_of(agent).startswith(ours + "/")  # its own, under the command's
        finally:
            proc.kill()
            proc.wait(WAIT)
        wait_for(lambda: not pid_alive(agent), "the agent ends")
        wait_for(lambda: not (theirs / "cgroup.procs").read_text().strip(), "the cgroup empties")
    finally:
        for inner in sorted(theirs.glob("*/"), reverse=True):
            if inner.is_dir():
                with contextlib.suppress(OSError):
                    inner.rmdir()
        wait_for(lambda: _removed(theirs), "the test's cgroup removed")


def _removed(cgroup: Path) -> bool:
    try:
        cgroup.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def test_a_cgroup_that_limits_nothing_below_the_shared_one_is_not_worth_a_cold_run(tmp_path: Path) -> None:
    # Where the run cannot be moved into its command's cgroup (a session's scope, root's: another
    # SSH login's), it stays in ours if that loses nothing but accounting; a limit set on the way
    # up to the cgroup both share sends the command cold.  (A tree of files in place of the kernel's.)
    common = tmp_path / "user.slice"
    scope = common / "session-7.scope" / "inner"
    scope.mkdir(parents=True)
    (common / "pids.max").write_text("300\n")  # shared: ours too
    (scope / "memory.max").write_text("max\n")
    (scope / "cpu.max").write_text("max 100000\n")
    (scope / "io.max").write_text("")
    assert not warm_request.limited(str(scope), str(common))
    (scope.parent / "memory.max").write_text("1073741824\n")
    assert warm_request.limited(str(scope), str(common))
    (scope.parent / "memory.max").write_text("max\n")
    (scope / "cpu.max").write_text("50000 100000\n")
    assert warm_request.limited(str(scope), str(common))


# --- trust ------------------------------------------------------------------------------------------


@pytest.mark.skipif(os.getuid() != 0, reason="needs another user to listen as")
def test_a_socket_of_another_user_in_our_directory_is_sent_nothing(tmp_path: Path) -> None:
    # The directory check (ours, 0700, no symlink) is made before the connect: a directory swapped
    # in between (its parent writable by another user), or a socket another user's server listens
    # on put there, and the command would hand that user its environment (API keys), its streams
    # and its terminal.  The command checks its peer (SO_PEERCRED) as the server checks its own.
    nobody = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="orchestrate-warm-"))
    try:
        base.chmod(0o777)
        theirs = base / "theirs.sock"
        got = base / "got"
        script = (
            "import os, socket, sys\n"
            f"os.setgid({nobody.pw_gid}); os.setuid({nobody.pw_uid})\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(sys.argv[1]); s.listen(1)\n"
            "print('listening', flush=True)\n"
            "s.settimeout(60); c, _ = s.accept(); c.settimeout(60)\n"
            "data = c.recv(1 << 20)\n"
            "open(sys.argv[2], 'w').write(str(len(data)))\n"
            "c.send(b'n')\n"
        )
        listener = subprocess.Popen(
            [sys.executable, "-c", script, str(theirs), str(got)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert listener.stdout is not None and listener.stdout.readline() == "listening\n"
            ours = tmp_path / "ours"
            ours.mkdir(mode=0o700)
            theirs.rename(ours / "warm.sock")  # the socket stays theirs: bound and listened on by them
            env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCHESTRATE_STORE": "off"}
            env.update(ORCHESTRATE_WARM="1", ORCHESTRATE_WARM_SOCKET=str(ours / "warm.sock"))
            env.update(ORCHESTRATE_HOME=str(tmp_path / "home"), SECRET_API_KEY="sk-not-theirs")
            done = subprocess.run(
                command("where"), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=90,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr  # cold
            listener.wait(WAIT)
            assert not got.exists() or got.read_text() == "0"  # connected at most: sent nothing
        finally:
            listener.kill()
            listener.communicate(timeout=WAIT)
    finally:
        shutil.rmtree(base)


@pytest.mark.skipif(os.getuid() != 0 or shutil.which("unshare") is None, reason="needs root's unshare")
@pytest.mark.parametrize("namespace", [["--net"], ["--fork", "--pid"], ["--mount"]])
def test_a_command_in_other_namespaces_is_not_served(
    warm: Warm, tmp_path: Path, namespace: list[str]
) -> None:
    # A container sharing /tmp (or the socket) with the host, with our uid, and the same paths for
    # the interpreter and the package (`docker run -v $HOME:$HOME -v /tmp:/tmp --user ...`): its
    # command was handed to the host's server, and ran there: out of its network namespace (the
    # agent on the host's network), its mount namespace (its directory read as the host's path),
    # its pid namespace (the child's pid, the command's to signal, names another process there).
    done = subprocess.run(
        ["unshare", *namespace, *command("where")], env=environment(warm, tmp_path), cwd=tmp_path,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert warm.runs() == 0  # cold, where the command is


# --- the run as a cold one -------------------------------------------------------------------------


def test_the_run_writes_in_the_commands_encoding(warm: Warm, tmp_path: Path) -> None:
    # PYTHONIOENCODING (or the locale, or -X utf8) made the command's streams: the run's are the
    # same, not the server's.
    def text(warm_or_not: str) -> bytes:
        done = subprocess.run(
            [*command("héllo text=1")[:-3], "héllo text=1"],
            env=environment(warm, tmp_path, PYTHONIOENCODING="latin-1", ORCHESTRATE_WARM=warm_or_not),
            cwd=tmp_path, capture_output=True, timeout=90, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    cold, hot = text("0"), text("1")
    assert warm.runs() == 1
    assert "héllo".encode("latin-1") in cold
    assert "héllo".encode("latin-1") in hot


def test_a_request_with_streams_python_cannot_make_is_refused(warm: Warm) -> None:
    # (the stream settings the command sends since the fix above: checked like every other field,
    # so a codec Python does not know is a "no", not a traceback in a forked run)
    good = good_request(["run", "--help"], {})
    bad = (*good[:11], (False, (("no-such-codec", "strict"), ("utf-8", "strict"), ("utf-8", "strict"))))
    fds = [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
    try:
        assert send(warm, marshal.dumps(bad), fds) == [b"n"]
        assert send(warm, marshal.dumps((*good[:11], (False, (("utf-8", "no-such-handler"),) * 3))), fds) == [
            b"n"
        ]
    finally:
        for fd in fds:
            os.close(fd)
    assert warm.runs() == 0


def test_the_run_keeps_time_in_the_commands_time_zone(warm: Warm, tmp_path: Path) -> None:
    # TZ is read by the C library once (Python's start, time.tzset): the run's local time was the
    # server's.  What shows it: Gemini's executor finds the session file gemini-cli named after the
    # local minute (executors/acp.py's prepare) and moves it out of the way; in another zone than
    # the agent's it looked for another name, and the session could be clobbered.
    session = "abcdef12-0000-4000-8000-000000000000"
    zone = "Pacific/Kiritimati"  # UTC+14: no server here runs in it
    chats = tmp_path / "home" / ".gemini" / "tmp" / "project" / "chats"
    chats.mkdir(parents=True)
    script = (
        "import datetime, sys\n"
        "now = datetime.datetime.now()\n"
        "for m in (0, 1):\n"
        "    print((now + datetime.timedelta(minutes=m)).strftime('%Y-%m-%dT%H-%M'))\n"
    )
    minutes = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "TZ": zone},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    files = [chats / f"session-{minute}-{session[:8]}.json" for minute in minutes]
    for file in files:
        file.write_text("{}")
    argv = [
        sys.executable,
        "-m",
        "orchestrate",
        "run",
        "-e",
        "gemini",
        "--base-command",
        f"{sys.executable} {FAKE_ACP}",
    ]
    argv += ["--approvals", "auto", "--output", "jsonl", "--resume", session, "hi"]
    subprocess.run(
        argv, env=environment(warm, tmp_path, TZ=zone, HOME=str(tmp_path / "home")), cwd=tmp_path,
        stdin=subprocess.DEVNULL, capture_output=True, timeout=90,
    )  # fmt: skip
    assert warm.runs() == 1
    assert not all(file.exists() for file in files), sorted(p.name for p in chats.iterdir())
