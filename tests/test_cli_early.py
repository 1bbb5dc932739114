"""`orchestrate run`'s early start (cli/early.py): the agent is spawned before the CLI loads, with the
command line, directory and environment the full path would give it (and only then adopted), and an
agent whose run is refused is killed before it is sent anything (an agent the early write takes on
is sent its prompt first: tests/test_early_write.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrate.cli import early
from orchestrate.cli import main as cli_main
from orchestrate.errors import OrchestrateError, SpawnError
from orchestrate.executors.base import Executor
from orchestrate.executors.options import ExecutorOptions
from orchestrate.process.spec import ProcessSpec
from orchestrate.registry import _BUILTINS, default_registry
from orchestrate.run.handle import Run
from orchestrate.task import Task

from .helpers import FAKE_ACP, FAKE_CLAUDE, pid_alive

FAKE = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLAUDE))}"
CLI = [sys.executable, "-m", "orchestrate", "run", "-e", "claude-code"]
JSONL = ["--approvals", "deny", "--output", "jsonl"]


class _Captured(Exception):
    def __init__(self, run: Run) -> None:
        self.run = run


class _Capture(Run):
    """The full path's run, stopped once made (its executor, task and spec are what matter)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        raise _Captured(self)


def full_run(args: list[str], monkeypatch: pytest.MonkeyPatch) -> Run | None:
    """The run `orchestrate ARGS...` would make, through click and pydantic, stopped before it
    starts anything (None: it refused)."""
    with monkeypatch.context() as patch:
        patch.setattr(cli_main, "Run", _Capture)
        result = CliRunner().invoke(cli_main.main, args)
    return result.exception.run if isinstance(result.exception, _Captured) else None


def full_spec(args: list[str], monkeypatch: pytest.MonkeyPatch) -> ProcessSpec | None:
    """The spec `orchestrate ARGS...` would run, through click and pydantic (None: it refused)."""
    run = full_run(args, monkeypatch)
    return None if run is None else run._spec


def early_names() -> list[str]:
    """The built-in executors the early start takes on (over pipes, nothing prepared, no policy args)."""
    names = []
    for name in _BUILTINS:
        cls = default_registry.get(name)
        plain = not cls.prepares(None) and cls.policy_args is Executor.policy_args
        if cls.transport == "pipes" and plain:
            names.append(name)
    return names


@pytest.fixture
def programs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every executor's program on $ORCHESTRATE_BIN_PATH (empty scripts: nothing is run here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in _BUILTINS:
        program = default_registry.get(name).program
        if program:
            script = bin_dir / program
            script.write_text("#!/bin/sh\n")
            script.chmod(0o755)
    monkeypatch.setenv("ORCHESTRATE_BIN_PATH", str(bin_dir))
    return tmp_path


def test_the_early_start_covers_claude_code() -> None:
    assert "claude-code" in early_names()


def test_the_early_start_covers_a_new_gemini_session_not_a_resumed_one(programs: Path) -> None:
    """Gemini's prepare moves a resumed session's file aside (executors/acp.py): a new session
    has nothing prepared, so it starts early; a resumed one does not."""
    assert "gemini" in early_names()
    assert early.early_spec(["run", "-e", "gemini", "--approvals", "deny", "hi"]) is not None
    assert early.early_spec(["run", "-e", "gemini", "--approvals", "deny", "--resume", "s1", "hi"]) is None


def test_the_stand_ins_hold_the_models_defaults() -> None:
    """The early start builds with plain stand-ins for ExecutorOptions and Task: a field the models
    grow or a default they change shows here, before it can make the two paths differ."""
    options = early._Options.__slots__
    assert set(options) == set(ExecutorOptions.model_fields)
    defaults = ExecutorOptions()
    stand_in = early._Options()
    for name in options:
        assert getattr(stand_in, name) == getattr(defaults, name), name
    task = Task(prompt="p", cwd=Path("/"))
    for name in early._Task.__slots__:
        assert name in Task.model_fields
        if name not in ("prompt", "cwd"):
            assert getattr(early._Task("p", Path("/")), name) == getattr(task, name), name


_WORDS = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12)
_OPTION = st.one_of(
    st.tuples(st.sampled_from(["--model"]), st.sampled_from(["opus", "sonnet", "x y", "--fork"])),
    st.tuples(
        st.sampled_from(["--permission-mode"]),
        st.sampled_from(["default", "acceptEdits", "plan", "bypassPermissions"]),
    ),
    st.tuples(st.sampled_from(["--resume"]), st.sampled_from(["abc-123", "missing", "-x"])),
    st.tuples(st.sampled_from(["--env"]), st.sampled_from(["A=1", "PATH=/x", "CLAUDECODE=1", "B=", "E=a=b"])),
    st.tuples(st.sampled_from(["--approvals"]), st.sampled_from(["auto", "deny"])),
    st.tuples(st.sampled_from(["--output"]), st.sampled_from(["jsonl", "text"])),
    st.tuples(st.sampled_from(["--timeout", "--startup-timeout", "--approval-timeout"]), st.just("30")),
    st.tuples(st.sampled_from(["--base-command", "--command"]), st.sampled_from(["/bin/echo", FAKE])),
    st.tuples(st.sampled_from(["--fork", "--resume-fallback", "--no-redact", "-v", "--verbose"])),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(early_names()),
    options=st.lists(_OPTION, max_size=7),
    equals=st.booleans(),
    prompt=_WORDS.filter(lambda p: p.strip() and not p.startswith("-")),
    in_cwd=st.booleans(),
)
def test_the_early_spec_is_the_full_paths_for_every_combination(
    programs: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    options: list[tuple[str, ...]],
    equals: bool,
    prompt: str,
    in_cwd: bool,
) -> None:
    """Whatever the options, the early start spawns exactly what the full path would run, or
    nothing: the approval and permission flags, the model, the session, the environment."""
    args = ["run", "-e", name, "--approvals", "deny"]  # the default, ask, needs a terminal
    if in_cwd:
        args += ["--cwd", str(programs)]
    for option in options:
        if len(option) == 2 and equals and option[0].startswith("--"):
            args.append(f"{option[0]}={option[1]}")
        else:
            args += list(option)
    args.append(prompt)
    full = full_spec(args, monkeypatch)
    try:
        ours = early.early_spec(args)
    except OrchestrateError:  # begin() starts nothing then; the full path must refuse it too
        assert full is None, args
        return
    if name in early._EARLY_UNLESS_RESUMED and any(option[0] == "--resume" for option in options):
        assert ours is None, args  # a resumed session is prepared first: the full path starts it
        return
    assert ours is not None, args  # every combination here is one the early start takes on
    assert ours == full, args


@pytest.mark.parametrize(
    "args",
    [
        ["run", "-e", "claude-code", "-i", "hi"],
        ["run", "-e", "claude-code", "--interactive", "hi"],
        ["run", "-e", "claude-code", "--worktree", "hi"],
        ["run", "-e", "claude-code", "--copy", "hi"],
        ["run", "-e", "claude-code", "-c", "a=1", "hi"],
        ["run", "-e", "claude-code", "--mcp-config", "m.json", "hi"],
        ["run", "-e", "claude-code", "--sandbox", "read-only", "hi"],
        ["run", "-e", "claude-code", "-"],
        ["run", "-e", "claude-code", "  "],
        ["run", "-e", "claude-code", "--", "-hi"],
        ["run", "-e", "claude-code", "--help"],
        ["run", "-e", "claude-code", "a", "b"],
        ["run", "-eclaude-code", "hi"],
        ["run", "-e=claude-code", "hi"],
        ["run", "-e", "claude-code", "--fork=1", "hi"],
        ["run", "-e", "claude-code", "--model"],
        ["run", "hi"],
        ["chat", "-e", "claude-code", "hi"],
        ["--version"],
        ["run", "-e", "claude-code-tui", "hi"],  # a terminal agent
        ["run", "-e", "gemini", "--resume", "s1", "hi"],  # prepares a resumed session's file
        ["run", "-e", "cursor", "hi"],  # its permission flags come from the approval service
        ["run", "-e", "no-such-agent", "hi"],
        ["run", "-e", "claude-code", "--cwd", "/nonexistent/dir", "hi"],
        ["run", "-e", "claude-code", "--approvals", "ask", "hi"],  # no terminal here (new session)
        ["run", "-e", "claude-code", "hi"],  # the same: ask is the default
    ],
)
def test_what_the_early_start_leaves_to_the_full_path(
    programs: Path, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(early, "_has_terminal", lambda: False)
    assert early.early_spec(args) is None


def test_ask_with_a_terminal_starts_early(programs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(early, "_has_terminal", lambda: True)
    assert early.early_spec(["run", "-e", "claude-code", "hi"]) is not None


# --- real processes ------------------------------------------------------------------------------

# Writes its pid, then everything it is sent, to files; lives on after its input ends.
_RECORDER = "echo $$ > {pid}; cat > {got}; exec sleep 30"


def recorder(tmp_path: Path) -> tuple[str, Path, Path]:
    pid, got = tmp_path / "pid", tmp_path / "got"
    script = _RECORDER.format(pid=shlex.quote(str(pid)), got=shlex.quote(str(got)))
    return f"/bin/sh -c {shlex.quote(script)} agent", pid, got


def wait_for(path: Path, seconds: float = 10.0) -> int:
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.01)
    return int(path.read_text())


def dies(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_policy_file_starts_no_agent_early(tmp_path: Path) -> None:
    """Only the full path reads a policy file: a file that is not a valid policy must not have
    started the agent (Claude Code runs the project's SessionStart hooks before it reads a byte)."""
    (tmp_path / "policy.toml").write_text("this is [not a policy\n")
    args = ["run", "-e", "claude-code", "--cwd", str(tmp_path), "--approvals", str(tmp_path / "policy.toml")]
    assert early.early_spec([*args, "hi"]) is None
    assert early.early_spec(["run", "-e", "claude-code", "--cwd", str(tmp_path), "--approvals", "deny", "hi"])


def test_an_early_agent_nobody_adopts_dies_having_received_nothing(tmp_path: Path) -> None:
    """What the CLI does when the full path refuses the run (cli/early.py's main ends with
    discard): the agent started early is killed, and was never sent a byte."""
    command, pid_file, got = recorder(tmp_path)
    args = ["run", "-e", "claude-code", "--base-command", command, "--cwd", str(tmp_path)]
    started = early.begin([*args, "--approvals", "deny", "hello"])
    assert started is not None
    try:
        pid = wait_for(pid_file)  # it was started early
    finally:
        early.discard()
    assert early.take() is None
    assert dies(pid)
    # Killed between its `echo` and the shell's opening of `got` (a loaded machine), it leaves no
    # file: either way it was sent nothing.
    assert not got.exists() or got.read_bytes() == b""


def test_the_agent_of_a_killed_cli_dies_even_before_adoption(tmp_path: Path) -> None:
    """SIGKILL to the CLI the moment its early agent runs: the supervisor sees its control socket
    close and kills the agent, adopted or not."""
    command, pid_file, _ = recorder(tmp_path)
    cli = subprocess.Popen(
        [*CLI, "--base-command", command, "--cwd", str(tmp_path), "--approvals", "deny", "hello"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pid = wait_for(pid_file)
        cli.kill()
    finally:
        cli.wait(10)
    assert dies(pid)


# `python -m orchestrate ARGS` that says which heavy modules were loaded at its first spawn.
_SPAWN_PROBE = (
    "import runpy, sys\n"
    "def hook(event, args):\n"
    "    spawns = ('subprocess.Popen', 'os.posix_spawn', 'os.fork')\n"
    "    if event in spawns and not hasattr(hook, 'seen'):\n"
    "        heavy = ('click', 'pydantic', 'anyio', 'asyncio')\n"
    "        hook.seen = sorted(m for m in heavy if m in sys.modules)\n"
    "        sys.stderr.write(f'loaded at the spawn: {hook.seen}\\n')\n"
    "sys.addaudithook(hook)\n"
    "sys.argv = ['orchestrate', *sys.argv[1:]]\n"
    "runpy.run_module('orchestrate', run_name='__main__', alter_sys=True)\n"
)


def _probed_run(args: list[str], prompt: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``orchestrate ARGS ... PROMPT`` through _SPAWN_PROBE, the store off: it succeeded, and its
    first spawn came before click, pydantic, anyio and asyncio were loaded."""
    done = subprocess.run(
        [sys.executable, "-c", _SPAWN_PROBE, *args, "--cwd", str(tmp_path), *JSONL, prompt],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ORCHESTRATE_STORE": "off", "ORCHESTRATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert "loaded at the spawn: []" in done.stderr
    assert '"outcome":"success"' in done.stdout.splitlines()[-1]
    return done


def test_an_early_run_is_a_run(tmp_path: Path) -> None:
    """Through the early start, the fake Claude answers and the run ends as it always did; the
    spawn came before click, pydantic, anyio and asyncio were loaded."""
    _probed_run([*CLI[3:], "--base-command", FAKE], "hi", tmp_path)


@pytest.mark.parametrize("off", ["ORCHESTRATE_SUPERVISOR", "ORCHESTRATE_CGROUPS"])
def test_an_early_run_without_a_supervisor_or_cgroups_is_a_run(off: str, tmp_path: Path) -> None:
    """With the supervisor (or cgroups) turned off, an early-startable run still runs: the early
    start steps aside and the run spawns the agent itself (it once died on an IndexError, a
    SpawnError naming no program)."""
    done = subprocess.run(
        [*CLI, "--base-command", FAKE, "--cwd", str(tmp_path), *JSONL, "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, off: "0", "ORCHESTRATE_STORE": "off", "ORCHESTRATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert '"outcome":"success"' in done.stdout.splitlines()[-1]


def test_a_spawn_error_naming_no_program_says_so() -> None:
    assert str(SpawnError([], "no supervisor on this machine")) == (
        "could not start the agent: no supervisor on this machine"
    )


def test_a_new_gemini_session_starts_early_and_is_adopted(tmp_path: Path) -> None:
    """A new Gemini session's agent is spawned before click, pydantic, anyio and asyncio are
    loaded, and the run takes it over: it is started once (a run that refused it would kill it and
    start its own: two starts), and answers."""
    starts = tmp_path / "starts"
    fake = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_ACP))}"
    agent = f"sh -c 'echo $$ >> {starts}; exec {fake}' acp"
    done = _probed_run(["run", "-e", "gemini", "--base-command", agent], "plain", tmp_path)
    assert len(starts.read_text().split()) == 1, done.stderr


def test_a_start_for_another_command_line_is_not_adopted(tmp_path: Path) -> None:
    """Run.adopt takes a process only if it runs exactly this run's spec: one started with another
    environment is killed before it is sent anything."""
    from orchestrate.executors.claude_code import ClaudeCodeExecutor
    from orchestrate.process.prestart import prestart

    command, pid_file, got = recorder(tmp_path)
    executor = ClaudeCodeExecutor(ExecutorOptions(base_command=command))
    task = Task(prompt="hello", cwd=tmp_path, env={"X": "1"})
    spec = executor.process_spec(task)
    other = spec.replace(env={**spec.env, "X": "2"})
    started = prestart(other)
    assert started is not None
    pid = wait_for(pid_file)
    run = Run(executor, task)
    assert not run.adopt(started)
    assert dies(pid) and got.read_bytes() == b""
    assert started.popen.poll() is not None  # its supervisor reaped, too
    same = prestart(spec)
    assert same is not None
    assert run.adopt(same) and run._prestarted is same
    same.discard()  # what __aenter__ does when it fails before the spawn
    assert same.popen.poll() is not None and got.read_bytes() == b""


def test_a_run_refused_after_its_supervisor_was_spawned_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor is spawned as soon as the arguments read as an early `run`, before the spec
    is built: when building it then refuses the run (here a bad --env), the supervisor is told
    nothing, exits having started nothing, and is reaped; the full path refuses the run too."""
    from orchestrate.process import prestart, supervisor

    marker = tmp_path / "started"
    command = f"/bin/sh -c {shlex.quote(f'touch {marker}; exec sleep 30')} agent"
    args = ["run", "-e", "claude-code", "--base-command", command, "--cwd", str(tmp_path)]
    args += ["--approvals", "deny"]
    spawned: list[prestart.Standby] = []
    real = prestart.standby

    def watched() -> prestart.Standby | None:
        made = real()
        if made is not None:
            spawned.append(made)
        return made

    monkeypatch.setattr(prestart, "standby", watched)
    assert early.begin([*args, "--env", "NOEQUALS", "hello"]) is None
    assert len(spawned) == 1  # it was spawned, and then
    assert spawned[0].popen.returncode == supervisor.NOTHING_STARTED  # told nothing, and reaped
    assert early.take() is None
    assert full_run([*args, "--env", "NOEQUALS", "hello"], monkeypatch) is None
    time.sleep(0.2)
    assert not marker.exists()
    # The control: the same run with a sound --env starts its agent.
    started = early.begin([*args, "--env", "A=1", "hello"])
    assert started is not None
    try:
        deadline = time.monotonic() + 10
        while not marker.exists():
            assert time.monotonic() < deadline, "the agent never ran"
            time.sleep(0.01)
    finally:
        early.discard()


def test_a_refused_cli_run_leaves_no_supervisor_and_no_agent(tmp_path: Path) -> None:
    """The same through the real command: refused at once, nothing ran, nothing is left."""
    marker = tmp_path / "started"
    command = f"/bin/sh -c {shlex.quote(f'touch {marker}; exec sleep 30')} agent"
    done = subprocess.run(
        [*CLI, "--base-command", command, "--cwd", str(tmp_path), *JSONL, "--env", "NOEQUALS", "hello"],
        capture_output=True,
        timeout=60,
        env={**os.environ, "ORCHESTRATE_STORE": "off", "ORCHESTRATE_HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode != 0 and b"--env expects KEY=VALUE" in done.stderr
    time.sleep(0.2)
    assert not marker.exists()
