"""`orchestrate run`'s early handshake (cli/early.py, run/early_opening.py, peers/handshake.py):
Codex's app-server and ACP agents are sent ``initialize`` right after their early spawn, by the
driver's own code and by default; the run that adopts the process records it as its own write and
waits for its answer without sending it again; a run refused after it kills the agent, which was
sent nothing else and no prompt; and a run that would not have written exactly that refuses the
process."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrate.approvals.simple import AutoDeny
from orchestrate.cli import early
from orchestrate.cli import main as cli_main
from orchestrate.errors import ConfigError
from orchestrate.executors.acp import AcpExecutor
from orchestrate.executors.base import Executor
from orchestrate.executors.claude_code import ClaudeCodeExecutor
from orchestrate.executors.codex import CodexExecExecutor, CodexExecutor
from orchestrate.executors.options import ExecutorOptions
from orchestrate.peers.acp_opening import open_acp
from orchestrate.peers.codex_opening import open_codex
from orchestrate.peers.handshake import Handshake
from orchestrate.process.prestart import prestart
from orchestrate.registry import default_registry
from orchestrate.run.acp import AcpDriver
from orchestrate.run.codex import CodexDriver
from orchestrate.run.driver import DriverContext
from orchestrate.run.early_opening import early_handshake, refused_opening
from orchestrate.run.handle import Run
from orchestrate.run.protocols import start_driver
from orchestrate.task import Task
from orchestrate.wire.lines import parse_line

from .helpers import (
    FAKE_ACP,
    FAKE_CODEX,
    early_home,
    install_program,
    install_recorder,
    pid_alive,
    python_json,
    recorded_cli_run,
)
from .test_early_write import dies, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the early start's supervisor: Linux")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return early_home(tmp_path, monkeypatch)


def agent_is(home: Path, script: str) -> None:
    """``script`` as the agent: `codex` on the bin path, and `agent` for the generic ACP executor."""
    for name in ("codex", "agent"):
        install_program(home, name, script)


def recorder(home: Path) -> tuple[Path, Path]:
    return install_recorder(home, "codex", "agent")


def fake(home: Path, agent: str) -> None:
    script = FAKE_CODEX if agent == "codex" else FAKE_ACP
    agent_is(home, f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(script))} "$@"\n')


def run_args(home: Path, *more: str, agent: str = "codex") -> list[str]:
    chosen = (
        ["-e", "codex"] if agent == "codex" else ["-e", "acp", "--base-command", str(home / "bin" / "agent")]
    )
    return ["run", *chosen, "--cwd", str(home / "work"), "--approvals", "deny", *more]


class _Stdin:
    """Stands for the agent's process: what the driver writes."""

    def __init__(self, until: int = 1) -> None:
        self.written: list[bytes] = []
        self.wrote = anyio.Event()  # set once ``until`` lines are written
        self._until = until

    async def write(self, data: bytes) -> None:
        self.written.append(data)
        if len(self.written) >= self._until:
            self.wrote.set()


def _context(stdin: _Stdin, tg: Any, executor: Executor, task: Task) -> DriverContext[Any]:
    return DriverContext(executor, task, stdin, AutoDeny(), tg, lambda _: None, lambda: None)  # type: ignore[arg-type]


# --- the bytes: the driver's own ------------------------------------------------------------------


AGENTS: dict[str, Callable[[], Executor]] = {
    "codex": lambda: CodexExecutor(ExecutorOptions()),
    "acp": lambda: AcpExecutor(ExecutorOptions(base_command=[sys.executable, str(FAKE_ACP)])),
}


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_the_handshake_is_what_the_driver_writes_first(home: Path, agent: str) -> None:
    """The early start's ``initialize`` is byte for byte the driver's own first line (and its id)."""
    executor = AGENTS[agent]()
    task = Task(prompt="hi", cwd=home / "work")

    async def first_write() -> bytes:
        stdin = _Stdin()
        async with anyio.create_task_group() as tg:
            driver = start_driver(_context(stdin, tg, executor, task))
            tg.start_soon(driver.start, "hi")
            with anyio.fail_after(5):
                await stdin.wrote.wait()
            tg.cancel_scope.cancel()
        return stdin.written[0]

    opening = early_handshake(executor)
    assert isinstance(opening, Handshake) and opening.prompt is None
    assert opening.lines == (anyio.run(first_write),)
    assert b'"method":"initialize"' in opening.lines[0] and b'"id":1' in opening.lines[0]
    # (Codex's own client sends no "jsonrpc"; ACP's has it)
    assert (b'"jsonrpc":"2.0"' in opening.lines[0]) == (agent == "acp")
    assert b"hi" not in opening.lines[0]  # no prompt in it


def test_which_agents_take_a_handshake(monkeypatch: pytest.MonkeyPatch) -> None:
    """Codex's app-server (not a subclass) and every ACP agent of the registry, each its own
    protocol's bytes; not codex exec (its prompt goes on stdin), Claude, Cursor or a terminal agent,
    nor an executor whose driver is another."""

    class Subclass(CodexExecutor):
        pass

    takes = {}
    for name in sorted(default_registry.names()):
        handshake = early_handshake(default_registry.create(name))
        takes[name] = None if handshake is None else handshake.lines
    acp = {name for name in takes if issubclass(default_registry.get(name), AcpExecutor)}
    assert acp >= {"acp", "gemini", "qwen", "opencode", "claude-code-acp", "codex-acp"}
    assert {name for name, lines in takes.items() if lines is not None} == acp | {"codex"}
    assert takes["codex"] == open_codex().lines and all(takes[name] == open_acp().lines for name in acp)
    for executor in (CodexExecExecutor(ExecutorOptions()), Subclass(ExecutorOptions())):
        assert early_handshake(executor) is None, executor
    monkeypatch.setattr(CodexExecutor, "driver", "prompt-on-stdin")
    assert early_handshake(CodexExecutor(ExecutorOptions())) is None


@pytest.mark.parametrize("answered_before_start", [True, False])
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_the_driver_takes_the_handshake_over_and_waits_for_its_answer(
    home: Path, answered_before_start: bool, agent: str
) -> None:
    """Taken over, the driver never writes ``initialize`` again: it waits for the answer to the one
    written early (already read, or still to come), then goes on (Codex: ``initialized`` and the
    thread; ACP: the session)."""
    executor = AGENTS[agent]()
    task = Task(prompt="hi", cwd=home / "work")
    opening = early_handshake(executor)
    assert opening is not None
    driver_class = {"codex": CodexDriver, "acp": AcpDriver}[agent]
    wanted = 2 if agent == "codex" else 1

    async def start() -> list[bytes]:
        stdin = _Stdin(until=wanted)
        async with anyio.create_task_group() as tg:
            driver = start_driver(_context(stdin, tg, executor, task))
            assert isinstance(driver, driver_class) and type(driver).takes_opening(opening)
            driver.take_opening(opening)
            answer = parse_line(b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}')
            if answered_before_start:  # (its answer was in the pipe before the run read it)
                await driver.on_line(answer)
            tg.start_soon(driver.start, "hi")
            await anyio.sleep(0.05)
            if not answered_before_start:
                assert stdin.written == []  # it waits, and writes nothing meanwhile
                await driver.on_line(answer)
            with anyio.fail_after(5):
                await stdin.wrote.wait()
            tg.cancel_scope.cancel()
        return stdin.written

    written = anyio.run(start)
    if agent == "codex":
        assert written[0] == b'{"method":"initialized"}\n'
        assert b'"method":"thread/start"' in written[1] and b'"id":2' in written[1]
    else:
        assert b'"method":"session/new"' in written[0] and b'"id":2' in written[0]
    assert not any(b'"initialize"' in line for line in written)


def test_a_driver_refuses_an_opening_it_did_not_make() -> None:
    """Not another protocol's handshake, not one with other bytes (another id, two lines)."""
    for driver, own, other in ((CodexDriver, open_codex, open_acp), (AcpDriver, open_acp, open_codex)):
        assert driver.takes_opening(own())
        assert not driver.takes_opening(object())
        assert not driver.takes_opening(other())
        opening = own()
        twice = Handshake(opening.peer, opening.request_id, opening.lines[0])
        twice.lines = (opening.lines[0], opening.lines[0])
        assert not driver.takes_opening(twice)
        peer = own().peer
        assert not driver.takes_opening(own(peer))  # (its request id is 2)


# --- through the CLI ------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_the_adopting_run_records_the_early_handshake_as_its_own(home: Path, agent: str) -> None:
    """Through the CLI with the fake agent: by default ``initialize`` is written before the run
    opened its log (its record is older than the header) and once only; with the early start's
    writes off (ORCHESTRATE_EARLY=spawn) the run writes it itself; the stdin records are the same."""
    fake(home, agent)
    records = {}
    for mode in ("1", "spawn"):
        log = home / f"log-{mode}.jsonl"
        args = run_args(home, "--output", "jsonl", "--record", str(log), agent=agent)
        _, started, chunks = recorded_cli_run([*args, "plain hi"], log, mode)
        stdin = [r for r in chunks if r["stream"] == "stdin"]
        assert chunks[0]["stream"] == "stdin"  # before anything it printed
        assert sum('"method":"initialize"' in r["data"] for r in stdin) == 1
        if mode == "1":  # written before the run opened its log
            assert stdin[0]["ts"] < started
        else:
            assert stdin[0]["ts"] > started
        records[mode] = [re.sub(r"sess_[0-9a-f]+", "sess_X", r["data"]) for r in stdin[:3]]
    assert records["1"] == records["spawn"]
    assert '"method":"initialize"' in records["1"][0]
    assert (
        records["1"][1] == '{"method":"initialized"}\n'
        if agent == "codex"
        else "session/new" in records["1"][1]
    )


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_a_run_refused_after_the_handshake_kills_its_agent_which_had_no_prompt(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], agent: str
) -> None:
    """An option only the full path refuses (made so here): the agent had read ``initialize`` and
    nothing else; it is killed, with its tree, before the CLI returns, and nothing is said about a
    prompt (it was sent none)."""
    pid_file, got = recorder(home)

    def refuse(**_: Any) -> ExecutorOptions:
        raise ConfigError("a bad option only the full path sees")

    monkeypatch.setattr(cli_main, "build_executor_options", refuse)
    args = [*run_args(home, agent=agent), "hello secret words"]
    started = early.begin(args)
    assert started is not None and started.was_written
    pid = int(wait_for(pid_file))
    received = wait_for(got, b"\n")
    with pytest.raises(SystemExit) as exit_:
        try:
            cli_main.main(args)
        finally:
            early.discard()
    assert exit_.value.code != 0
    assert not pid_alive(pid) or dies(pid, 5.0)
    received = got.read_bytes()
    own = open_codex() if agent == "codex" else open_acp()
    assert received == own.lines[0]  # the handshake, whole, and nothing else
    assert b"secret" not in received
    err = capsys.readouterr().err
    assert "had been sent the prompt" not in err
    assert early.take() is None


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_spawn_mode_writes_nothing(home: Path, monkeypatch: pytest.MonkeyPatch, agent: str) -> None:
    pid_file, got = recorder(home)
    monkeypatch.setenv("ORCHESTRATE_EARLY", "spawn")
    started = early.begin([*run_args(home, agent=agent), "hello"])
    try:
        assert started is not None and not started.was_written
        wait_for(pid_file)
    finally:
        early.discard()
    assert not got.exists() or got.read_bytes() == b""


def test_a_handshake_another_run_would_not_write_is_refused(home: Path) -> None:
    """Run.adopt of a process sent a handshake, by a run whose driver takes none (Claude's), or
    whose executor is not the one the handshake is for: refused, killed at once."""
    pid_file, _ = recorder(home)
    codex = CodexExecutor(ExecutorOptions())
    task = Task(prompt="hello", cwd=home / "work")
    spec = codex.process_spec(task)
    started = prestart(spec)
    assert started is not None
    opening = open_codex()
    assert started.write(opening.lines, opening)
    pid = int(wait_for(pid_file))
    claude = ClaudeCodeExecutor(ExecutorOptions())
    assert refused_opening(claude, spec, opening) is not None
    run = Run(claude, task)
    run._spec = spec  # (the same command line: only the opening differs)
    assert not run.adopt(started)
    assert run.early_refused is not None
    assert started.discarded and dies(pid, 5.0)
    assert refused_opening(codex, spec, opening) is None


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_a_handshake_the_run_refuses_to_adopt_is_not_called_a_prompt(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], agent: str
) -> None:
    """The run refuses the agent started early (made so here): it is killed and the run starts its
    own, which answers; nothing says a prompt was sent, since only the handshake was."""
    fake(home, agent)
    monkeypatch.setattr(Run, "_opened_as_ours", lambda self, started: "refused here")
    args = [*run_args(home, "--output", "jsonl", agent=agent), "plain hi"]
    started = early.begin(args)
    assert started is not None and started.was_written and not early.prompted(started)
    with pytest.raises(SystemExit) as exit_:
        try:
            cli_main.main(args)
        finally:
            early.discard()
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err
    assert started.discarded
    assert '"outcome":"success"' in out.splitlines()[-1]
    assert "had been sent the prompt" not in err and "killed" not in err


def test_the_early_start_asks_about_a_handshake_only_for_its_protocols() -> None:
    """cli/early.py loads run/early_opening.py (and asks it) only for the protocols that may take
    a handshake: every executor that takes one speaks one of them."""
    for name in default_registry.names():
        executor = default_registry.create(name)
        if early_handshake(executor) is not None:
            assert (executor.driver or executor.protocol) in early._HANDSHAKE_PROTOCOLS, name


@pytest.mark.parametrize(("executor", "loaded"), [("claude-code", False), ("codex", True)])
def test_a_run_with_no_handshake_does_not_load_its_module(home: Path, executor: str, loaded: bool) -> None:
    """A Claude run's early start (nothing to write by default) leaves run/early_opening.py and its
    imports unloaded; a Codex run loads it to write the handshake."""
    recorder(home)
    (home / "bin" / "claude").write_bytes((home / "bin" / "codex").read_bytes())
    (home / "bin" / "claude").chmod(0o755)
    args = ["run", "-e", executor, "--cwd", str(home / "work"), "--approvals", "deny", "hello"]
    script = (
        "import json, sys\n"
        "from orchestrate.cli import early\n"
        "started = early.begin(sys.argv[1:])\n"
        "written = bool(started and started.was_written)\n"
        "early.discard()\n"
        "print(json.dumps([started is not None, written, 'orchestrate.run.early_opening' in sys.modules]))\n"
    )
    got, _ = python_json(script, *args)
    assert got == [True, loaded, loaded]  # type: ignore[comparison-overlap]


@pytest.mark.parametrize("value", ["0", "off", "OFF", "false", "False", "no", " 0 "])
def test_the_ways_of_turning_the_early_start_off(
    home: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """`off` or `false` meaning "on" (and writing the handshake) would surprise: all say no."""
    pid_file, _ = recorder(home)
    monkeypatch.setenv("ORCHESTRATE_EARLY", value)
    assert early.begin([*run_args(home), "hello"]) is None
    assert not pid_file.exists()
