"""Plain and Temporal workers never share a store (store/workers.py): each enters itself when it starts,
and one of the other kind is refused while it is there, on SQLite and on Postgres, also when both start
at the same instant from different processes.  And what `orchestrate worker --help` promises about
--temporal and the signals that stop a worker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrate.cli.main import main
from orchestrate.store import Store, WorkerKindError

from .helpers import ROOT

HOST = socket.gethostname()
ME = f"{HOST}:{os.getpid()}:test"  # a live process on this machine: its entry counts


def test_the_other_kind_is_refused_until_the_worker_leaves_dies_or_expires(url: str) -> None:
    with Store.open(url) as store:
        store.enter_worker(ME, "temporal", 60)
        store.enter_worker(f"{ME}-2", "temporal", 60)  # the same kind: welcome
        with pytest.raises(WorkerKindError, match=r"worked by a Temporal worker .* and 1 more") as refused:
            store.enter_worker(f"{HOST}:{os.getpid()}:plain", "plain", 60)
        assert refused.value.code == "worker_kind_conflict" and "--temporal" in str(refused.value)
        store.leave_worker(ME)
        store.leave_worker(f"{ME}-2")
        store.enter_worker(ME, "plain", 60)  # both left: the other kind may come
        with pytest.raises(WorkerKindError, match="worked by a plain worker"):
            store.enter_worker("elsewhere:1:t", "temporal", 60)
        store.leave_worker(ME)
        # A worker on another machine that stopped beating: its entry expires.
        store.enter_worker("elsewhere:1:t", "temporal", 0.2)
        with pytest.raises(WorkerKindError):
            store.enter_worker(ME, "plain", 60)
        time.sleep(0.3)
        store.enter_worker(ME, "plain", 60)
        # One that kept beating stays.
        store.worker_seen(ME, 60)
        with pytest.raises(WorkerKindError):
            store.enter_worker("elsewhere:2:t", "temporal", 60)
        # A worker of this machine whose process is gone counts no more, expired or not.
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait(10)
        store.leave_worker(ME)
        store.enter_worker(f"{HOST}:{dead.pid}:gone", "plain", 3600)
        store.enter_worker(ME, "temporal", 60)
        with pytest.raises(ValueError, match="kind"):
            store.enter_worker(ME, "mixed", 60)


RACER = textwrap.dedent(
    """
    import json, os, socket, sys
    from orchestrate.store import Store, WorkerKindError
    url, kind, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = Store.open(url)
    store.last_change()  # connected
    print("ready", flush=True)
    won = []
    for n in range(rounds):
        sys.stdin.readline()  # go
        name = f"{socket.gethostname()}:{os.getpid()}:{kind}{n}"
        try:
            store.enter_worker(name, kind, 60)
            won.append(n)
        except WorkerKindError:
            pass
        print("entered", flush=True)
        sys.stdin.readline()  # the round is over: leave
        store.leave_worker(name)
        print("left", flush=True)
    print(json.dumps(won), flush=True)
    store.close()
    """
)


def test_two_kinds_starting_at_once_never_both_get_in(url: str) -> None:
    rounds = 8
    procs = {
        kind: subprocess.Popen(
            [sys.executable, "-c", RACER, url, kind, str(rounds)],
            cwd=ROOT,
            env=os.environ | {"PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for kind in ("plain", "temporal")
    }

    def say(line: bytes, expect: bytes) -> None:
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.write(line)
            proc.stdin.flush()
        for proc in procs.values():
            assert proc.stdout is not None and proc.stdout.readline() == expect, proc.communicate()

    for proc in procs.values():
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n", proc.communicate()
    for _ in range(rounds):
        say(b"go\n", b"entered\n")
        say(b"next\n", b"left\n")
    won = {}
    for kind, proc in procs.items():
        assert proc.stdout is not None
        line = proc.stdout.readline()  # (communicate would skip what readline has buffered)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err.decode()[-2000:]
        won[kind] = set(json.loads(line))
    # Every round exactly one kind got in: never both, never neither.
    assert not won["plain"] & won["temporal"]
    assert won["plain"] | won["temporal"] == set(range(rounds))


def test_a_plain_worker_on_a_temporal_store_says_so_and_exits_1(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        store.enter_worker(ME, "temporal", 60)
    done = subprocess.run(
        [sys.executable, "-m", "orchestrate", "worker", "--store", url],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 1, done
    assert "worked by a Temporal worker" in done.stderr and "cannot share a store" in done.stderr
    assert "Traceback" not in done.stderr and " on " not in done.stderr  # refused before it started


def test_worker_help_says_what_temporal_does_and_which_signals_stop_it() -> None:
    shown = CliRunner().invoke(main, ["worker", "--help"], terminal_width=100)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "--temporal ADDRESS" in text and "Temporal workflow" in text and "activit" in text
    assert "SIGTERM or SIGINT" in text
    # What each kind does with its live turns when signalled: finish them, or hand them back.
    assert "lets the live turns finish; a second one stops them now" in text
    assert "hands its live turns back, not finished" in text and "resumes the agent's session" in text
    assert "never share a store" in text and "exits 1" in text
