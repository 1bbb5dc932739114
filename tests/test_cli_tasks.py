"""The task commands as real processes on a real SQLite store ($ORCHESTRATE_HOME in the test's
directory): submit, worker, tasks, show, follow, cancel, send, approve/deny, and `run` recorded."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from orchestrate.cli.main import main
from orchestrate.store import Store

from .helpers import FAKE_CLAUDE, ROOT, group_members

FAKE = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLAUDE))}"


def orchestrate(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrate", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )


def read(*args: str) -> str:
    """A command that only reads the store, run in this process (an interpreter start saved)."""
    done = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.output


def background(*args: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrate", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=os.environ | {"PYTHONPATH": str(ROOT)} | (env or {}),
        )


def submit(tmp_path: Path, prompt: str, *args: str) -> int:
    done = orchestrate(
        "submit", "-e", "claude-code", "--command", FAKE, "--cwd", str(tmp_path), *args, prompt
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def store() -> Store:
    return Store.open()  # the default store, under the test's $ORCHESTRATE_HOME


def wait_until(test: Any, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while not test():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`orchestrate worker` in its own process; what it printed is shown if the test fails."""
    log = tmp_path / "worker.log"
    # (A "slow" turn streams for 60 s here, so a cancel still finds it running however long the
    # cancel's own process takes to start on a loaded machine.)
    slow = {"FAKE_SLOW_WORDS": "600"}
    proc = background("worker", "--approvals", "auto", "--poll", "0.05", "--lease", "3", log=log, env=slow)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(5)
    print(log.read_text())


_PASSING = (" pending approval", " running")


def section(text: str) -> list[str]:
    """Rendered entry lines, without the ones that name a session (different in every run) and a
    tool's passing states: a live reader that falls behind gets each entry's latest state (patches
    are coalesced for slow readers), so on a loaded machine it may skip one that `show`, reading
    every stored patch, prints.  Every settled line (status, output, diff) must still match."""
    return [
        line.rstrip()
        for line in text.splitlines()
        if line.strip() and "Session `" not in line and not line.rstrip().endswith(_PASSING)
    ]


def test_submit_worker_follow_tasks_show_end_to_end(tmp_path: Path, worker: subprocess.Popen[bytes]) -> None:
    first = submit(tmp_path, "plain", "--label", "docs")
    second = submit(tmp_path, "tool", "--after", str(first), "--priority", "5", "--label", "code")
    # Followed from another process, from before it runs to its end.
    follow = background("follow", str(second), log=tmp_path / "follow.log")
    assert follow.wait(30) == 0, (tmp_path / "follow.log").read_text()
    followed = (tmp_path / "follow.log").read_text()
    assert f"[task {second}] queued" in followed and f"[task {second}] done" in followed
    assert "⏺ Shell `echo original` success" in followed and "ran: echo original" in followed

    # --json: one event per line, every seq once and in order; --after resumes exactly after one.
    events = [orjson.loads(line) for line in read("follow", str(second), "--json").splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)) and len(events) > 5
    assert {e["kind"] for e in events} == {"state", "raw", "patch"}
    after4 = read("follow", str(second), "--json", "--after", "4")
    later = [orjson.loads(line) for line in after4.splitlines()]
    assert later == events[4:]

    listed = orjson.loads(read("tasks", "--json"))
    assert [(t["id"], t["status"], t["labels"]) for t in listed] == [
        (first, "done", ["docs"]),
        (second, "done", ["code"]),
    ]
    table = read("tasks", "--label", "code")
    assert f"{second}   done    claude-code" in table and "$0.0010" in table and "plain" not in table
    assert read("tasks", "--status", "failed", "--json").strip() == "[]"

    shown = orjson.loads(read("show", str(second), "--json"))
    [run] = shown["runs"]
    assert shown["task"]["cost_usd"] == pytest.approx(0.001) and shown["task"]["input_tokens"] == 10
    assert run["status"] == "done" and run["entries"][-1]["type"]["kind"] == "token_usage"
    # `show` renders a run's entries as `run` renders them live.
    text = read("show", str(second))
    assert "tokens: 10 in, 5 out, 2 cache read, 1 cache write; cost $0.0010 (over 1 runs)" in text
    live = orchestrate(
        "run", "-e", "claude-code", "--command", FAKE, "--approvals", "auto", "--cwd", str(tmp_path), "tool"
    )
    assert live.returncode == 0, live.stderr
    rendered = section(text.split(f"── run {run['id']}", 1)[1])[1:]  # after the run's heading
    assert rendered == section(live.stdout) and any(line.endswith(" success") for line in rendered)

    # send: a follow-up turn of the finished task; retry: one more attempt of a failed one.
    sent = orchestrate("send", str(second), "plain again")
    assert sent.returncode == 0 and "queued as a follow-up run" in sent.stdout, sent.stderr
    broken = submit(tmp_path, "crash")
    with store() as s:
        wait_until(lambda: s.get(broken).status == "failed" and s.get(second).status == "done")
        retried = orchestrate("retry", str(broken))
        assert retried.stdout.strip() == f"task {broken}: queued"
        wait_until(lambda: len(s.runs(broken)) == 2 and s.get(broken).finished)
        assert [r.status for r in s.runs(second)] == ["done", "done"]
        assert s.runs(second)[1].prompt == "plain again"

    worker.send_signal(signal.SIGINT)
    assert worker.wait(10) == 0


def test_cancel_from_another_process(tmp_path: Path, worker: subprocess.Popen[bytes]) -> None:
    task_id = submit(tmp_path, "slow")
    with store() as s:
        wait_until(lambda: any("w2" in str(e.data) for e in s.events(task_id=task_id)))
        done = orchestrate("cancel", str(task_id))
        assert done.returncode == 0 and "cancel requested" in done.stdout
        wait_until(lambda: s.get(task_id).finished)
        [run] = s.runs(task_id)
        assert (s.get(task_id).status, run.status) == ("cancelled", "cancelled")
    assert run.pid and group_members(run.pid) == []
    # Cancelling a queued task ends it at once; an unknown task is a usage error.
    queued = submit(tmp_path, "plain", "--after", str(task_id))  # blocked: its dependency was cancelled
    assert orchestrate("cancel", str(queued)).stdout.strip() == f"task {queued}: blocked"
    assert orchestrate("cancel", "999").returncode == 2


def test_run_is_recorded_as_a_task_and_a_store_failure_does_not_break_it(tmp_path: Path) -> None:
    args = ["run", "-e", "claude-code", "--command", FAKE, "--approvals", "auto", "--cwd", str(tmp_path)]
    done = orchestrate(*args, "--output", "jsonl", "tool")
    assert done.returncode == 0, done.stderr
    *patches, last = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert last["type"] == "result"
    ids = {"taskId": last["taskId"], "runId": last["runId"]}
    with store() as s:
        task = s.get(ids["taskId"])
        [run] = s.runs(task.id)
        events = s.events(task_id=task.id, after=0, limit=10_000)
    assert (task.status, run.id, run.status, run.kind) == ("done", ids["runId"], "done", "cli")
    assert task.cost_usd == pytest.approx(0.001) and run.pid and run.raw_log
    assert [e.data for e in events if e.kind == "patch"] == patches  # every patch, as printed
    assert len([e for e in events if e.kind == "raw"]) == len(Path(run.raw_log).read_bytes().splitlines())

    # A store that cannot be opened: the run goes on and says so; no stored line.
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    os.environ["ORCHESTRATE_STORE"] = f"sqlite:///{blocker}/store.db"
    try:
        broken = orchestrate(*args, "--output", "jsonl", "plain")
    finally:
        del os.environ["ORCHESTRATE_STORE"]
    assert broken.returncode == 0, broken.stderr
    assert "not recorded in the store" in broken.stderr
    last_line = orjson.loads(broken.stdout.splitlines()[-1])
    assert last_line["type"] == "result" and last_line["taskId"] is None and last_line["runId"] is None


def test_cancel_stops_an_orchestrate_run_from_another_process(tmp_path: Path) -> None:
    """`orchestrate cancel` reaches a run a person started with `orchestrate run`, not only a
    worker's: the recorder sees the store's flag and the run stops, its agent with it."""
    args = ["run", "-e", "claude-code", "--command", FAKE, "--approvals", "deny", "--cwd", str(tmp_path)]
    # (A 60 s turn: on a loaded machine the cancel's own process may take longer to start than
    # the fake's default 5 s of streaming, and the run would finish first.)
    slow = {"FAKE_SLOW_WORDS": "600"}
    live = background(*args, "--output", "jsonl", "slow", log=tmp_path / "run.log", env=slow)
    try:
        with store() as s:
            wait_until(lambda: bool(s.list_tasks()) and bool(s.runs(s.list_tasks()[0].id)[0].pid))
            [task] = s.list_tasks()
            [run] = s.runs(task.id)
            assert orchestrate("cancel", str(task.id)).returncode == 0
            started = time.monotonic()
            assert live.wait(15) != 0  # stopped, not finished
            assert time.monotonic() - started < 10
            wait_until(lambda: s.get(task.id).finished)
            assert (s.get(task.id).status, s.runs(task.id)[0].status) == ("cancelled", "cancelled")
        assert run.pid and group_members(run.pid) == []
        assert "cancelled from the store" in (tmp_path / "run.log").read_text()
    finally:
        live.kill()
        live.wait(5)


def test_two_workers_share_the_queue_and_never_run_a_task_twice(tmp_path: Path) -> None:
    ids = [submit(tmp_path, "plain") for _ in range(4)]
    workers = [
        background("worker", "--poll", "0.02", "--capacity", "2", log=tmp_path / f"w{i}.log") for i in (1, 2)
    ]
    try:
        with store() as s:
            wait_until(lambda: all(s.get(t).status == "done" for t in ids), within=40)
            runs = [s.runs(t) for t in ids]
        # A worker stops cleanly on SIGTERM once it is up; one still importing would die of it, so
        # the signal waits for both to say they are working (the tasks may be done before that).
        wait_until(lambda: all(b" on " in (tmp_path / f"w{i}.log").read_bytes() for i in (1, 2)))
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = [w.wait(10) for w in workers]
    assert [len(r) for r in runs] == [1] * 4
    assert codes == [0, 0]


def test_usage_errors() -> None:
    assert orchestrate("show", "42").returncode == 2
    unknown = orchestrate("submit", "-e", "no-such-agent", "hi")
    assert unknown.returncode == 2 and "no-such-agent" in unknown.stderr
    assert orchestrate("worker", "--per-executor", "codex").returncode == 2
    steer = orchestrate("worker", "--steer", "--temporal", "localhost:7233")
    assert steer.returncode == 2 and "--steer is not available with --temporal" in steer.stderr


def test_approvals_wait_in_the_store_for_approve_or_deny(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    proc = background("worker", "--poll", "0.05", log=log)  # approvals: the store's (the default)
    try:
        task_id = submit(tmp_path, "tool")
        with store() as s:
            wait_until(lambda: s.approvals(task_id=task_id) != [])
            [listed] = orjson.loads(read("approvals", "--json"))
            assert listed["task_id"] == task_id and listed["request"]["command"] == "echo original"
            assert "waiting_approval" in read("tasks")
            denied = orchestrate("deny", str(listed["id"]), "--reason", "not today", "--by", "carol")
            late = orchestrate("approve", str(listed["id"]))
            wait_until(lambda: s.get(task_id).finished)
            events = s.events(task_id=task_id, limit=10_000)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert denied.returncode == 0 and denied.stdout.strip() == f"approval {listed['id']}: denied"
    assert late.returncode == 1 and "already answered: denied by carol" in late.stderr
    assert any("not today" in str(e.data) for e in events if e.kind == "patch")
