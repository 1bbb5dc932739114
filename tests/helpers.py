"""Shared helpers for the tests: paths, the fake CLI, and process-survival checks."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrate import ApprovalDecision, ApprovalRequest, Run, Task
from orchestrate.approvals import ApprovalService
from orchestrate.entries import ErrorEntry, NormalizedEntry, ToolUse
from orchestrate.executors.acp import AcpExecutor
from orchestrate.executors.base import Executor, ExecutorOptions
from orchestrate.executors.claude_code import ClaudeCodeExecutor
from orchestrate.executors.codex import CodexExecutor
from orchestrate.process.pipes import ShutdownPolicy
from orchestrate.replay import replay
from orchestrate.run import RunResult

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
FAKE_CLAUDE = FIXTURES / "bin" / "fake_claude.py"
FAKE_CODEX = FIXTURES / "bin" / "fake_codex.py"
FAKE_ACP = FIXTURES / "bin" / "fake_acp.py"
FAKE_CURSOR = FIXTURES / "bin" / "fake_cursor.py"
CLI_BIN = ROOT / "clis" / "node_modules" / ".bin"
# Set by .ci/run: a missing real CLI fails its tests there instead of skipping them.
REQUIRE_REAL_CLIS = os.environ.get("ORCHESTRATE_REQUIRE_REAL_CLIS") == "1"


def needs_cli(name: str) -> pytest.MarkDecorator:
    """Skip unless the pinned CLI ``name`` is installed in clis/ (or real CLIs are required)."""
    return pytest.mark.skipif(
        not (CLI_BIN / name).exists() and not REQUIRE_REAL_CLIS, reason=f"real {name} CLI not installed"
    )


def fake_claude(**options: object) -> ClaudeCodeExecutor:
    """The Claude Code executor, pointed at the fake CLI script."""
    return ClaudeCodeExecutor(ExecutorOptions(base_command=[sys.executable, str(FAKE_CLAUDE)], **options))  # type: ignore[arg-type]


def fake_codex(**options: object) -> CodexExecutor:
    """The Codex app-server executor, pointed at the fake app-server script."""
    return CodexExecutor(ExecutorOptions(base_command=[sys.executable, str(FAKE_CODEX)], **options))  # type: ignore[arg-type]


def fake_acp(**options: object) -> AcpExecutor:
    """The generic ACP executor, pointed at the fake ACP agent."""
    return AcpExecutor(ExecutorOptions(base_command=[sys.executable, str(FAKE_ACP)], **options))  # type: ignore[arg-type]


def started_by_this_session(proc: Path) -> bool:
    """Whether the process ``/proc/PID`` was started by this pytest session: with pytest-xdist, by
    this worker (its agents inherit PYTEST_XDIST_WORKER: an agent's environment is ours plus its
    executor's), not by the other one, whose agents may well be running now."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return True
    try:
        return f"PYTEST_XDIST_WORKER={worker}".encode() in (proc / "environ").read_bytes().split(b"\0")
    except OSError:
        return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def marked(mark: str) -> list[int]:
    """Live processes running ``sleep MARK``: found by command line, so also those whose pid no one
    told us (the flood's)."""
    wanted = b"sleep\0" + mark.encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline == wanted and pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def real_cli_available(program: str) -> bool:
    return (CLI_BIN / program).exists()


During = Callable[[Run], Awaitable[None]]
FAST = ShutdownPolicy(interrupt_grace=1.0, stdin_grace=1.0, term_grace=0.5)


async def run_agent(
    executor: Executor,
    cwd: Path,
    prompt: str,
    approvals: ApprovalService | None = None,
    during: During | None = None,
    within: float = 30,
    **task: Any,
) -> tuple[RunResult, Run]:
    """Run ``executor`` end to end; check that no process survives and that the raw log replays to
    exactly the entries the live run showed."""
    run = Run(executor, Task(prompt=prompt, cwd=cwd, **task), approvals, shutdown=FAST)
    with anyio.fail_after(within):
        async with run:
            if during is not None:
                await during(run)
            result = await run.wait()
    assert_nothing_survives(run)
    assert result.raw_log is not None and result.raw_log.exists()
    normalizer = executor.create_normalizer()
    list(replay(result.raw_log, normalizer))
    assert normalizer.entries == result.entries
    return result, run


def assert_nothing_survives(run: Run) -> None:
    assert run.pids
    for pid in run.pids:
        assert group_members(pid) == [], f"processes of group {pid} outlived the run"


async def wait_for(run: Run, test: Callable[[NormalizedEntry], bool]) -> None:
    async for patch in run.patches():
        if test(patch.entry):
            return
    raise AssertionError("the run ended before the awaited entry appeared")


def tool_status(status: str) -> Callable[[NormalizedEntry], bool]:
    return lambda e: isinstance(e.type, ToolUse) and e.type.tool.status == status


def errors(result: RunResult) -> list[tuple[str | None, str]]:
    return [
        (e.type.error.code, e.type.error.message) for e in result.entries if isinstance(e.type, ErrorEntry)
    ]


def texts(result: RunResult, kind: str) -> list[str]:
    return [e.content for e in result.entries if e.type.kind == kind]


class Never:
    """A person who never answers."""

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        await anyio.sleep_forever()
        raise AssertionError


class FirstNeverAnswered:
    """A person who takes one question at a time (as the terminal prompt does), never answers the
    first (it ends only by being taken back) and approves every later one."""

    def __init__(self) -> None:
        self.lock = anyio.Lock()
        self.asked: list[str | None] = []
        self.taken_back: list[str | None] = []

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        async with self.lock:
            self.asked.append(request.command)
            if len(self.asked) == 1:
                try:
                    await anyio.sleep_forever()
                finally:
                    self.taken_back.append(request.command)
            return ApprovalDecision.approve()


def unrecorded_run(command: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> str:
    """``command`` (an ``orchestrate run ... --output jsonl``, by any interpreter or script) with the
    store off and its home in ``tmp_path``; it must succeed.  Its stdout."""
    done = subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            **(env or {}),
            "PYTHONPATH": str(ROOT),
            "ORCHESTRATE_STORE": "off",
            "ORCHESTRATE_HOME": str(tmp_path),
        },
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"outcome":"success"' in done.stdout.splitlines()[-1]
    return done.stdout


def python_json(script: str, *args: str, stdin: int | None = None) -> tuple[dict[str, Any], str]:
    """``python -c script args...`` with this checkout on its path and unbuffered output off (the
    harnesses of the supervisor's tests fork: buffered output is what they check is not written
    twice); it must succeed.  Its last stdout line as JSON, and the whole stdout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return got, done.stdout


RECORDER = "#!/bin/sh\necho $$ > {pid}\ncat > {got}\nexec sleep 30\n"
"""An agent that writes its pid, then everything it is sent, to files, and lives on after its input
ends (the early start's tests: what reached it before any run adopted it)."""


def install_program(home: Path, name: str, script: str) -> Path:
    """``script`` as the program ``name`` in ``home``/bin (those tests' $ORCHESTRATE_BIN_PATH)."""
    program = home / "bin" / name
    program.write_text(script)
    program.chmod(0o755)
    return program


def install_recorder(home: Path, *names: str) -> tuple[Path, Path]:
    """:data:`RECORDER` as each of ``names``; the files of its pid and of what it was sent."""
    pid, got = home / "pid", home / "got"
    for name in names:
        install_program(home, name, RECORDER.format(pid=shlex.quote(str(pid)), got=shlex.quote(str(got))))
    return pid, got


def recorded_cli_run(args: list[str], log: Path, early: str) -> tuple[str, float, list[dict[str, Any]]]:
    """``orchestrate ARGS...`` (which must record its raw log at ``log``) with
    ORCHESTRATE_EARLY=``early``; it must succeed.  Its stdout, the time its raw log was opened (the
    header's), and the log's chunk records."""
    done = subprocess.run(
        [sys.executable, "-m", "orchestrate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ORCHESTRATE_EARLY": early},
    )
    assert done.returncode == 0, done.stderr
    assert '"outcome":"success"' in done.stdout.splitlines()[-1]
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    started = datetime.fromisoformat(records[0]["started"]).timestamp()
    return done.stdout, started, [r for r in records if r.get("type") == "chunk"]


def early_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Programs of our own on $ORCHESTRATE_BIN_PATH (tmp_path/bin), the default early mode, no
    store, no Claude settings; the work directory is tmp_path/work."""
    for name in ("bin", "home", "work"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("ORCHESTRATE_BIN_PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ORCHESTRATE_STORE", "off")
    monkeypatch.delenv("ORCHESTRATE_EARLY", raising=False)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    return tmp_path
