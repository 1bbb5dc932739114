"""The cyclic garbage collector is paused while ``orchestrate`` loads (cli/__init__.py) and always
given back: right after a run's first entry from its agent, a few seconds into a run whose agent
says nothing (with the store on or off), at once for any other command, and when the command's
``main`` returns or raises (so an in-process caller never keeps it off)."""

from __future__ import annotations

import gc
import io
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrate.cli import early, pause_collector, recording, resume_collector
from orchestrate.cli import main as cli_main
from orchestrate.executors.options import ExecutorOptions

from .helpers import ROOT

# Run `orchestrate ARGS...`; print, on stderr, whether the collector was on at each stdout line.
WATCH = r"""
import gc, io, os, sys
real = os.fdopen(os.dup(1), "wb", buffering=0)
seen = []

class Watch(io.RawIOBase):
    def writable(self):
        return True

    def write(self, data):
        data = bytes(data)
        if data.strip():
            seen.append(gc.isenabled())
        real.write(data)
        return len(data)

sys.stdout = io.TextIOWrapper(io.BufferedWriter(Watch()), line_buffering=True)
from orchestrate.cli.early import main
sys.argv = ["orchestrate", *sys.argv[1:]]
try:
    main()
finally:
    print("SEEN", seen, gc.isenabled(), file=sys.stderr)
"""

# Claude Code's first line at once, then the result once it has read the prompt.
AGENT = (
    """echo '{"type":"system","subtype":"init","session_id":"s","model":"m"}'; read -r x; """
    """echo '{"type":"result","subtype":"success","is_error":false,"session_id":"s","result":"ok"}'"""
)

RUN = ["run", "-e", "claude-code", "--output", "jsonl", "--approvals", "deny"]


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector as the test found it, whatever the test did."""
    was = gc.isenabled()
    try:
        yield
    finally:
        resume_collector()
        if was:
            gc.enable()


def test_a_run_resumes_it_right_after_its_agent_s_first_entry(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCHESTRATE_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-c", WATCH, *RUN, "--base-command", f"sh -c {shlex.quote(AGENT)} agent", "hello"],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    line = next(x for x in proc.stderr.decode().splitlines() if x.startswith("SEEN"))
    # the prompt's entry and the agent's first: paused while loading (the line goes out first);
    # the result entry and the result line: on again; on at the end.
    assert line == "SEEN [False, False, True, True] True", line


def test_the_command_s_main_gives_it_back_even_when_it_raises(
    collector: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cli/early.py's main pauses it while the click command loads and runs, and resumes it on
    the way out, however it goes: a caller in the same process keeps its collector."""
    seen: list[bool] = []

    def command() -> None:
        seen.append(gc.isenabled())
        raise SystemExit(4)

    monkeypatch.setattr(cli_main, "main", command)
    monkeypatch.setattr(sys, "argv", ["orchestrate", "--version"])
    gc.enable()
    with pytest.raises(SystemExit):
        early.main()
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_caller_stays_off(collector: None) -> None:
    gc.disable()
    pause_collector()
    resume_collector()
    assert not gc.isenabled()


def test_any_other_command_resumes_it_at_once(collector: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    def schema() -> dict[str, Any]:
        seen.append(gc.isenabled())
        return {}

    monkeypatch.setattr("orchestrate.entries.entry_json_schema", schema)
    gc.enable()
    pause_collector()
    result = CliRunner().invoke(cli_main.main, ["schema"])
    assert result.exit_code == 0, result.output
    assert seen == [True]


@pytest.mark.parametrize("store", ["off", "on"])
def test_an_agent_that_says_nothing_gets_it_back_within_the_wait(
    collector: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, store: str
) -> None:
    """No first entry: the collector comes back after recording.py's wait (shortened here), with
    the store off (a timer) and on (the thread that opens the store)."""
    monkeypatch.setattr(recording, "_FIRST_WAIT", 0.2)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # (the store's complaint about the fake run)
    if store == "off":
        monkeypatch.setenv(recording.STORE_ENV, "off")
    else:
        monkeypatch.setenv(recording.STORE_ENV, f"sqlite:///{tmp_path / 'store.db'}")
    gc.enable()
    pause_collector()
    run: Any = SimpleNamespace(task=None, pids=[])  # (no agent: nothing busy to wait for)
    with recording.record_run("claude-code", ExecutorOptions(), run, "jsonl"):
        deadline = time.monotonic() + 5
        while not gc.isenabled() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert gc.isenabled()
