"""What ``orchestrate run -e claude-code`` has loaded when it prints its first entry made of the
agent's output: only what that entry needs.  The store (SQLAlchemy, Alembic, the engine) opens on a
thread once that entry is out (cli/recording.py); the serve stack, Temporal, the ACP library, the
other executors and their normalizers, rich and the views, the shell parser and the policy rules are
never needed by a Claude run's first entry.  A module imported at the top of a file on this path
would pull one of them in and cost every run its import time, silently: this test says which.

The run is a real ``python -m orchestrate`` process (through the early start, and without it) with
an agent that prints Claude Code's first line at once (a shell, as bench/startup.py uses); a small
wrapper around ``runpy`` notes ``sys.modules`` at the moment the first such entry is written to
stdout.  The run's own store is on (a fresh ``ORCHESTRATE_HOME``), as a user's run is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrate.executors.claude_code import ClaudeCodeExecutor
from orchestrate.executors.options import ExecutorOptions

from .helpers import ROOT, run_agent

# Claude Code's first stream-json line, at once; then it waits for its input to end.
INSTANT_AGENT = (
    '/bin/sh -c \'echo "{\\"type\\":\\"system\\",\\"subtype\\":\\"init\\",'
    '\\"session_id\\":\\"s\\",\\"model\\":\\"m\\"}"; exec cat >/dev/null\' agent'
)
RUN = ["run", "-e", "claude-code", "--output", "jsonl", "--approvals", "deny"]
RUN += ["--base-command", INSTANT_AGENT]

# Run `orchestrate ARGS...`; at the first stdout line that is not the prompt's own entry, write the
# seconds since the start and the modules loaded to $FIRST_ENTRY_OUT (JSON).
AT_FIRST_ENTRY = r"""
import io, json, os, runpy, sys, time
start = time.monotonic()
out = os.environ["FIRST_ENTRY_OUT"]
real = os.fdopen(os.dup(1), "wb", buffering=0)
seen = []

class Watch(io.RawIOBase):
    def writable(self):
        return True

    def write(self, data):
        data = bytes(data)
        if not seen and data.strip() and b'"user_message"' not in data:
            seen.append(True)
            with open(out, "w") as f:
                tokenize = sys.modules.get("tokenize")
                tokenized = tokenize is not None and tokenize._compile.cache_info().currsize > 0
                seconds = time.monotonic() - start
                json.dump({"seconds": seconds, "modules": sorted(sys.modules), "tokenized": tokenized}, f)
        real.write(data)
        return len(data)

sys.stdout = io.TextIOWrapper(io.BufferedWriter(Watch()), line_buffering=True)
sys.argv = ["orchestrate", *sys.argv[1:]]
runpy.run_module("orchestrate", run_name="__main__", alter_sys=True)
"""

# Not loaded at the first entry: (module, why).  A package stands for its submodules too.
NOT_YET = {
    "sqlalchemy": "the store opens on a thread after the first entry",
    "alembic": "the store's migrations, likewise",
    "orchestrate.store": "likewise",
    "orchestrate.engine": "the recorder (engine/record.py) and the queue: likewise",
    "orchestrate.serve": "the HTTP API: `orchestrate serve` only",
    "fastapi": "the HTTP API",
    "uvicorn": "the HTTP API",
    "starlette": "the HTTP API",
    "httpx": "the HTTP API's clients",
    "temporalio": "the Temporal backend",
    "acp": "the ACP library: ACP executors only",
    "pyte": "terminal executors only",
    "tree_sitter": "the shell parser: the first command an approval judges",
    "rich": "the text views: not with --output jsonl",
    "orchestrate.testing": "the model server and conformance tools",
    "orchestrate.workspace": "worktrees: --worktree only",
    "orchestrate.cli.tasks": "the task commands",
    "orchestrate.cli.workspace": "the workspace commands",
    "orchestrate.cli.live": "the live view",
    "orchestrate.cli.render": "the text view",
    "orchestrate.cli.chat": "--interactive / chat",
    "orchestrate.cli.failure": "the result's failure reasons: at the end",
    "orchestrate.run.acp": "the ACP driver",
    "orchestrate.run.codex": "the Codex driver",
    "orchestrate.run.result": "the result: at the end",
    "orchestrate.executors.acp": "another executor",
    "orchestrate.executors.codex": "another executor",
    "orchestrate.executors.cursor": "another executor",
    "orchestrate.executors.terminal": "another executor",
    "orchestrate.executors.zed": "another executor",
    "orchestrate.normalizers.acp": "another protocol's normalizer",
    "orchestrate.normalizers.codex_app_server": "another protocol's normalizer",
    "orchestrate.normalizers.codex_exec_jsonl": "another protocol's normalizer",
    "orchestrate.normalizers.cursor_jsonl": "another protocol's normalizer",
    "orchestrate.normalizers.terminal_screen": "another protocol's normalizer",
    "orchestrate.approvals.shell": "the shell parser's front: the first command an approval judges",
    "orchestrate.approvals.policy": "the rules of a policy file",
    "orchestrate.approvals.display": "the question on screen: the first question",
    "orchestrate.approvals.editor": "likewise",
    "importlib.metadata": "pydantic's plugin search: cli/pydantic_plugins.py when none is installed",
    "email": "importlib.metadata's (and nothing else of a run's)",
    "zipfile": "likewise",
    "pydantic.type_adapter": "entries.PATCH_ADAPTER, made when first asked for (the task commands)",
    "orchestrate.approvals.facts": "a call's parsed facts: the pipeline's first request",
    "orchestrate.approvals.scopes": "the session's 'always' memory: likewise",
    "orchestrate.approvals.commands": "the command rules and parser: likewise",
    "orchestrate.approvals.words": "likewise",
    "orchestrate.approvals.paths": "the path rules: likewise",
}
# Loaded by then, or the watch fired at the wrong moment (this test's own check).
NEEDED = ("orchestrate.entries", "orchestrate.normalizers.claude_stream_json", "orchestrate.run.handle")
# The store's thread starts at the first entry, or this long after the start (cli/recording.py):
# a run slower than that may have started it legitimately, and is tried again.
_STORE_WAIT = 3.0


def test_every_module_named_exists() -> None:
    """A misspelt name would never be found loaded: each of ours must be a real module."""
    for name in [*NOT_YET, *NEEDED]:
        if name.startswith("orchestrate."):
            assert importlib.util.find_spec(name) is not None, name


def loaded_at_first_entry(tmp_path: Path, early: str) -> list[str]:
    """The modules loaded when the first entry of the agent's output is printed."""
    return list(seen_at_first_entry(tmp_path, early)["modules"])


def seen_at_first_entry(tmp_path: Path, early: str) -> dict[str, Any]:
    """What the watch noted when the first entry of the agent's output was printed."""
    out = tmp_path / f"first-entry-{early}.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ORCHESTRATE_HOME": str(tmp_path / "home"),
        "ORCHESTRATE_EARLY": early,
        "FIRST_ENTRY_OUT": str(out),
    }
    env.pop("ORCHESTRATE_STORE", None)  # the store on, as in a user's run
    for _ in range(3):
        out.unlink(missing_ok=True)
        proc = subprocess.Popen(
            [sys.executable, "-c", AT_FIRST_ENTRY, *RUN, "hello"],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 30
            while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.05)  # the file is written whole before the line goes out
        finally:
            proc.kill()
            _, err = proc.communicate(timeout=10)
        assert out.exists(), f"no first entry from the agent: {err.decode(errors='replace')[-2000:]}"
        seen = json.loads(out.read_text())
        if seen["seconds"] < _STORE_WAIT * 0.8:
            return dict(seen)
    pytest.fail(f"the first entry came after {seen['seconds']:.1f} s three times: too slow to judge")


@pytest.mark.parametrize("early", ["1", "0"], ids=["early start", "no early start"])
def test_the_first_entry_loads_only_what_it_needs(tmp_path: Path, early: str) -> None:
    modules = loaded_at_first_entry(tmp_path, early)
    for name in NEEDED:
        assert name in modules, f"{name} not loaded: the watch fired before the first entry"
    found = {
        name: why
        for name, why in NOT_YET.items()
        if any(m == name or m.startswith(name + ".") for m in modules)
    }
    assert not found, f"loaded before the first entry: {found}"


def test_nothing_was_tokenized_before_the_first_entry(tmp_path: Path) -> None:
    """pydantic reads each default factory's signature, and a builtin's (``list``) is parsed from
    its text by the tokenizer, whose patterns are compiled on first use (~2.5 ms): the models on
    the way to the first entry use factories of Python's own (executors/options.py)."""
    assert seen_at_first_entry(tmp_path, "1")["tokenized"] is False


# An agent that prints before it reads anything, then answers the first thing it reads: its output
# may come before or between the run's first writes.
_EAGER_AGENT = (
    'echo \'{"type":"system","subtype":"init","session_id":"s","model":"m"}\'; '
    "read -r first; read -r second; "
    'echo \'{"type":"result","subtype":"success","is_error":false,"session_id":"s","result":"ok"}\''
)


@pytest.mark.anyio
async def test_the_first_writes_are_logged_and_read_in_their_order(tmp_path: Path) -> None:
    """The run's first writes reach the raw log before the agent's answer to them, the prompt's
    entry is the first, and the log replays to exactly the live entries (run_agent checks that),
    whatever the agent printed meanwhile: the order a change to when the normalizer is made (one
    was tried: bench/README.md, *Time to first entry*) must keep."""
    executor = ClaudeCodeExecutor(ExecutorOptions(base_command=["/bin/sh", "-c", _EAGER_AGENT]))
    result, _ = await run_agent(executor, tmp_path, "hello")
    assert result.raw_log is not None
    records = [json.loads(line) for line in result.raw_log.read_bytes().splitlines()[1:]]
    chunks = [(r["stream"], r.get("data", "")) for r in records if r["type"] == "chunk"]
    prompt = next(i for i, (stream, data) in enumerate(chunks) if stream == "stdin" and '"user"' in data)
    answer = next(i for i, (stream, data) in enumerate(chunks) if stream == "stdout" and '"result"' in data)
    assert prompt < answer, chunks  # the answer to the prompt is logged after it
    kinds = [e.type.kind for e in result.entries]
    assert kinds[0] == "user_message" and "system_message" in kinds, kinds


@pytest.mark.anyio
async def test_an_agent_gone_before_the_first_write_loses_nothing(tmp_path: Path) -> None:
    """An agent that exits at once: whatever of the first writes went out is logged and read
    before the log closes (the log replays to the live entries: run_agent), and the exit is told."""
    executor = ClaudeCodeExecutor(ExecutorOptions(base_command=["/bin/sh", "-c", "exit 3"]))
    result, _ = await run_agent(executor, tmp_path, "hello")
    assert result.exit_code == 3
    assert any(e.type.kind == "error" for e in result.entries), result.entries
