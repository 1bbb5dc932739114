"""`orchestrate run`'s early write (cli/early.py, run/early_opening.py): Claude Code's first message
is written right after the early spawn, by the driver's own code, only where the agent asks before
every tool that changes anything; the run that adopts the process records it as its own; a run
refused after it kills the agent at once and says so; what the agent asks meanwhile goes through
the run's approval pipeline once adopted; and a CLI killed meanwhile leaves no process."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrate.approvals.simple import AutoDeny
from orchestrate.cli import early
from orchestrate.cli import main as cli_main
from orchestrate.errors import ConfigError
from orchestrate.executors.claude_asks import always_asks
from orchestrate.executors.claude_code import ClaudeCodeExecutor
from orchestrate.executors.options import ExecutorOptions
from orchestrate.peers import claude_control
from orchestrate.peers.claude_opening import ClaudeOpening
from orchestrate.process.prestart import prestart
from orchestrate.run.driver import DriverContext
from orchestrate.run.early_opening import early_opening, why_not_early
from orchestrate.run.handle import Run
from orchestrate.run.protocols import start_driver
from orchestrate.task import Task

from .helpers import (
    CLI_BIN,
    FAKE_CLAUDE,
    early_home,
    install_program,
    install_recorder,
    needs_cli,
    pid_alive,
    recorded_cli_run,
)
from .test_cli_early import full_run

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the early start's supervisor: Linux")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `claude` of our own on $ORCHESTRATE_BIN_PATH (the executor's program, as the early write
    wants), and a HOME with no Claude settings; the work directory is tmp_path/work."""
    home = early_home(tmp_path, monkeypatch)
    monkeypatch.setenv("ORCHESTRATE_EARLY", "write")  # (opt-in: the default writes no prompt)
    return home


def claude_is(home: Path, script: str) -> None:
    install_program(home, "claude", script)


def recorder(home: Path) -> tuple[Path, Path]:
    return install_recorder(home, "claude")


def fake_claude(home: Path, tee: Path | None = None) -> None:
    """The fake Claude as `claude`; with ``tee``, what it prints is copied there too (so a test can
    see what it asked before any run read its pipe)."""
    command = f'{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLAUDE))} "$@"'
    if tee is None:
        claude_is(home, f"#!/bin/sh\nexec {command}\n")
    else:
        claude_is(home, f"#!/bin/sh\n{command} | tee {shlex.quote(str(tee))}\n")


def wait_for(path: Path, wanted: bytes = b"", seconds: float = 15.0) -> bytes:
    deadline = time.monotonic() + seconds
    while True:
        data = path.read_bytes() if path.exists() else b""
        if data.strip() and wanted in data:
            return data
        assert time.monotonic() < deadline, f"{path} never had {wanted!r}: {data[:300]!r}"
        time.sleep(0.01)


def dies(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def run_args(home: Path, *more: str) -> list[str]:
    return ["run", "-e", "claude-code", "--cwd", str(home / "work"), "--approvals", "deny", *more]


# --- the bytes: the driver's own ------------------------------------------------------------------


class _Stdin:
    """Stands for the agent's process: what the driver writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.written.append(data)


async def _driver_writes(run: Run) -> list[bytes]:
    stdin = _Stdin()
    async with anyio.create_task_group() as tg:
        ctx = DriverContext(run.executor, run.task, stdin, AutoDeny(), tg, lambda _: None, lambda: None)
        driver = start_driver(ctx)  # type: ignore[arg-type]  # (a stand-in process)
        await driver.start(run.task.prompt)
    return stdin.written


_PROMPTS = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(
    lambda p: p.strip() and not p.startswith("-") and not p.lstrip().startswith("/")  # (/: never early)
)
_OPTION = st.one_of(
    st.tuples(st.just("--model"), st.sampled_from(["opus", "sonnet", "x y"])),
    st.tuples(st.just("--permission-mode"), st.sampled_from(["default", "manual"])),
    st.tuples(st.just("--resume"), st.sampled_from(["abc-123", "s p"])),
    st.tuples(st.just("--env"), st.sampled_from(["A=1", "B=", "E=a=b", "CLAUDE_CODE_MAX_OUTPUT_TOKENS=1"])),
    st.tuples(st.just("--output"), st.sampled_from(["jsonl", "text"])),
    st.tuples(st.sampled_from(["--timeout", "--startup-timeout", "--approval-timeout"]), st.just("30")),
    st.tuples(st.sampled_from(["--fork", "--resume-fallback", "--no-redact", "-v"])),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(options=st.lists(_OPTION, max_size=6), prompt=_PROMPTS)
def test_the_early_lines_are_the_drivers_for_every_combination(
    home: Path, monkeypatch: pytest.MonkeyPatch, options: list[tuple[str, ...]], prompt: str
) -> None:
    """Whatever the options and the prompt (any text: quotes, newlines, any script), the early start
    writes exactly the bytes the run's driver writes first (the request id's random part made the
    same for both), and the full path's run takes them over."""
    claude_is(home, "#!/bin/sh\n")
    args = run_args(home) + [word for option in options for word in option] + [prompt]
    with monkeypatch.context() as patch:
        patch.setattr(claude_control.secrets, "token_hex", lambda n: "ab" * n)
        made = early._early(args)
        assert made is not None, args
        executor, spec, early_prompt = made
        opening = early_opening(executor, spec, early_prompt)
        assert isinstance(opening, ClaudeOpening), (args, opening)
        run = full_run(args, monkeypatch)
        assert run is not None, args
        assert run._spec == spec
        written = anyio.run(_driver_writes, run)
    assert list(opening.lines) == written, args
    assert b"req_1_abababab" in written[0]
    assert why_not_early(run.executor, run._spec) is None


def test_the_driver_takes_the_early_lines_over_and_writes_nothing(home: Path) -> None:
    """The driver that takes an opening starts with the peer it left (the initialize request it
    awaits) and writes nothing itself."""
    run_executor = ClaudeCodeExecutor(ExecutorOptions())
    task = Task(prompt="hi", cwd=home / "work")
    opening = early_opening(run_executor, run_executor.process_spec(task), "hi")
    assert isinstance(opening, ClaudeOpening)

    async def start() -> tuple[list[bytes], Any]:
        stdin = _Stdin()
        async with anyio.create_task_group() as tg:
            ctx = DriverContext(run_executor, task, stdin, AutoDeny(), tg, lambda _: None, lambda: None)
            driver = start_driver(ctx)  # type: ignore[arg-type]
            assert type(driver).takes_opening(opening)
            driver.take_opening(opening)
            await driver.start("hi")
            assert not driver.is_idle  # a turn is under way
        return stdin.written, driver

    claude_is(home, "#!/bin/sh\n")
    written, driver = anyio.run(start)
    assert written == []
    assert driver.peer is opening.peer and len(opening.peer._sent) == 1  # initialize, awaited


# --- only where the agent asks before acting ------------------------------------------------------


@pytest.mark.parametrize(
    "more",
    [
        ["--permission-mode", "bypassPermissions"],
        ["--permission-mode", "acceptEdits"],
        ["--permission-mode", "auto"],
        ["--permission-mode", "dontAsk"],
        ["--permission-mode", "plan"],
        ["--permission-mode", "Default"],
        ["--base-command", "claude"],  # a wrapper's own options cannot be seen
        ["--env", "CLAUDE_CODE_EVEN_MORE_DANGEROUSLY_SKIP_PERMISSIONS=1"],
        ["--env", "CLAUDE_BG_SESSION_PERMISSION_RULES=x"],
        # not known to loosen asking, nor known not to: unknown costs the early write
        ["--env", "CLAUDE_CODE_DISABLE_INLINE_SHELL_RM_PROMPT=1"],
        ["--env", "CLAUDE_CODE_REMOTE_TOOLS_HOST_ALLOWS_UNATTENDED=1"],
        ["--env", "claude_code_some_future_option=1"],
    ],
)
def test_no_early_write_where_the_agent_may_act_without_asking(home: Path, more: list[str]) -> None:
    claude_is(home, "#!/bin/sh\n")
    plain = early._early([*run_args(home), "hi"])
    assert plain is not None and isinstance(early_opening(*plain), ClaudeOpening)  # (without ``more``: one)
    made = early._early([*run_args(home, *more), "hi"])
    assert made is not None  # the agent is still started early ...
    assert isinstance(early_opening(*made), str)  # ... but sent nothing


_LOOSE_SETTINGS: list[Any] = [
    {"permissions": {"allow": ["Bash(ls:*)"]}},
    {"permissions": {"defaultMode": "acceptEdits"}},
    {"permissions": {"defaultMode": "bypassPermissions"}},
    {"permissions": "everything"},
    {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "true"}]}]}},
    {"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "true"}]}]}},
    {"enabledPlugins": {"p@m": True}},
    {"sandbox": {"enabled": True, "autoAllowBashIfSandboxed": True}},
    {"env": {"CLAUDE_CODE_EVEN_MORE_DANGEROUSLY_SKIP_PERMISSIONS": "1"}},
    {"env": {"CLAUDE_CODE_DISABLE_SUBSTITUTION_RM_PROMPT": "1"}},
    {"env": ["not", "an", "object"]},
    ["not", "an", "object"],
    "not json {",
]


@pytest.mark.parametrize("where", ["project", "local", "user", "parent"])
@pytest.mark.parametrize("content", _LOOSE_SETTINGS)
def test_no_early_write_under_settings_that_let_it_act(home: Path, where: str, content: Any) -> None:
    """Any settings file Claude Code reads that may let it act without asking (allow rules, a
    loose default mode, hooks, plugins, a sandbox, such a variable), or that cannot be read."""
    folder = {
        "project": home / "work" / ".claude",
        "local": home / "work" / ".claude",
        "user": home / "home" / ".claude",
        "parent": home / ".claude",
    }[where]
    folder.mkdir(parents=True, exist_ok=True)
    name = "settings.local.json" if where == "local" else "settings.json"
    (folder / name).write_bytes(content.encode() if isinstance(content, str) else orjson.dumps(content))
    claude_is(home, "#!/bin/sh\n")
    made = early._early([*run_args(home), "hi"])
    assert made is not None
    assert isinstance(early_opening(*made), str)


@pytest.mark.parametrize(
    "content",
    [
        {},
        {"model": "opus"},
        {"permissions": {"deny": ["Bash"], "defaultMode": "default"}},
        {"env": {"A": "1"}},
    ],
)
def test_harmless_settings_keep_the_early_write(home: Path, content: Any) -> None:
    (home / "work" / ".claude").mkdir()
    (home / "work" / ".claude" / "settings.json").write_bytes(orjson.dumps(content))
    claude_is(home, "#!/bin/sh\n")
    made = early._early([*run_args(home), "hi"])
    assert made is not None
    assert isinstance(early_opening(*made), ClaudeOpening)


def test_only_the_options_the_executor_builds_keep_it_asking(home: Path) -> None:
    """The command line is read with an allow-list: any option not built by the executor (extra
    arguments, a skip-permissions flag, an allowed-tools list) ends the early write."""
    program = str(home / "bin" / "claude")
    ours = ClaudeCodeExecutor(ExecutorOptions()).build_argv(Task(prompt="p", cwd=home))
    base = [program, *ours[1:]]
    env: dict[str, str] = {"HOME": str(home / "home")}
    assert always_asks(base, env, home / "work", program) is None
    for extra in (
        ["--dangerously-skip-permissions"],
        ["--allow-dangerously-skip-permissions"],
        ["--allowedTools", "Bash"],
        ["--settings", "{}"],
        ["--add-dir", "/"],
        ["--mcp-config", "m.json"],
        ["--permission-prompt-tool", "mcp__x__y"],
        ["--permission-mode"],
    ):
        assert always_asks([*base, *extra], env, home / "work", program) is not None, extra
    without = [w for w in base if w not in ("--permission-prompt-tool", "stdio")]
    assert always_asks(without, env, home / "work", program) is not None
    assert always_asks(base, env, home / "work", None) is not None  # a base command was given
    assert always_asks(["/bin/other", *base[1:]], env, home / "work", program) is not None


def test_a_long_prompt_is_written_by_the_run(home: Path) -> None:
    claude_is(home, "#!/bin/sh\n")
    made = early._early([*run_args(home), "x" * 20000])
    assert made is not None
    assert isinstance(early_opening(*made), str)


# --- real processes -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [None, "1", "spawn"])
def test_by_default_the_agent_is_spawned_early_and_sent_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch, mode: str | None
) -> None:
    """The early write is opt-in (ORCHESTRATE_EARLY=write): by default the agent starts early and
    its first message waits for the run."""
    pid_file, got = recorder(home)
    if mode is None:
        monkeypatch.delenv("ORCHESTRATE_EARLY")
    else:
        monkeypatch.setenv("ORCHESTRATE_EARLY", mode)
    started = early.begin([*run_args(home), "hello"])
    try:
        assert started is not None and not started.was_written
        wait_for(pid_file)
        time.sleep(0.2)
        assert not got.exists() or b"hello" not in got.read_bytes()
    finally:
        early.discard()


def test_the_adopting_run_records_the_early_lines_as_its_own(home: Path) -> None:
    """Through the CLI, the fake Claude read its prompt before the run existed (its stdin records
    are older than the raw log's header), answered, and the run's records are those of a run that
    wrote the lines itself (ORCHESTRATE_EARLY=spawn), but for the request id's random part."""
    fake_claude(home)
    records = {}
    for mode in ("write", "spawn"):
        log = home / f"log-{mode}.jsonl"
        args = run_args(home, "--output", "jsonl", "--record", str(log))
        out, started, chunks = recorded_cli_run([*args, "plain hi"], log, mode)
        assert "hello from fake claude" in out
        stdin = [r for r in chunks if r["stream"] == "stdin"]
        assert [r["stream"] for r in chunks[:2]] == ["stdin", "stdin"]  # before anything it printed
        first_two = [r["data"] for r in stdin[:2]]
        records[mode] = [re.sub(r"req_1_[0-9a-f]{8}", "req_1_ID", d) for d in first_two]
        if mode == "write":  # written before the run opened its log
            assert stdin[0]["ts"] < started
        else:
            assert stdin[0]["ts"] > started
    assert records["write"] == records["spawn"]
    assert '"subtype":"initialize"' in records["write"][0] and '"content":"plain hi"' in records["write"][1]


def test_a_run_refused_after_the_early_write_kills_its_agent_and_says_so(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An option only the full path refuses (made so here): the agent had read its prompt; it is
    killed, with its tree, before the CLI returns, and stderr says so."""
    pid_file, got = recorder(home)

    def refuse(**_: Any) -> ExecutorOptions:
        raise ConfigError("a bad option only the full path sees")

    monkeypatch.setattr(cli_main, "build_executor_options", refuse)
    args = [*run_args(home), "hello"]
    # early.main(), with a pause to see the agent read its prompt before the full path refuses
    assert early.begin(args) is not None
    pid = int(wait_for(pid_file))
    assert b'"content":"hello"' in wait_for(got, b"hello")  # it was sent the prompt, early
    with pytest.raises(SystemExit) as exit_:
        try:
            cli_main.main(args)
        finally:
            early.discard()
    assert exit_.value.code != 0
    assert not pid_alive(pid) or dies(pid, 5.0)
    err = capsys.readouterr().err
    assert "had been sent the prompt" in err and "killed" in err
    assert early.take() is None


def test_ctrl_c_while_the_cli_loads_kills_the_early_agent_without_a_traceback(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C after the early write, before click's own handling starts: exit 130, the agent (which
    had read its prompt) killed and said to be, for the interrupt, not for a refusal."""
    pid_file, got = recorder(home)

    def interrupted() -> None:
        wait_for(got, b"hello")  # (it was sent the prompt before the key was pressed)
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "main", interrupted)
    monkeypatch.setattr(sys, "argv", ["orchestrate", *run_args(home), "hello"])
    try:
        early.main()
        code: object = "returned"
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:  # (the test fails, not the session: pytest stops on this one)
        code = "KeyboardInterrupt escaped"
    assert code == 130
    pid = int(wait_for(pid_file))
    assert not pid_alive(pid) or dies(pid, 5.0)
    err = capsys.readouterr().err
    assert "(interrupted)" in err and "killed" in err and "refused" not in err
    assert early.take() is None


def test_a_start_another_run_would_not_write_is_refused_killed(home: Path) -> None:
    """Run.adopt with lines written early for another prompt, or to a process another spec ran:
    refused, killed at once; early_refused says why."""
    pid_file, got = recorder(home)
    executor = ClaudeCodeExecutor(ExecutorOptions())
    task = Task(prompt="hello", cwd=home / "work")
    spec = executor.process_spec(task)
    for other_prompt, other_spec, why in (
        ("goodbye", spec, "another prompt"),
        ("hello", spec.replace(env={**spec.env, "X": "2"}), "another command line"),
    ):
        pid_file.unlink(missing_ok=True)
        got.unlink(missing_ok=True)
        started = prestart(other_spec)
        assert started is not None
        opening = early_opening(executor, other_spec, other_prompt)
        assert isinstance(opening, ClaudeOpening)
        assert started.write(opening.lines, opening)
        pid = int(wait_for(pid_file))
        assert other_prompt.encode() in wait_for(got, other_prompt.encode())  # it read it
        run = Run(executor, task)
        assert not run.adopt(started)
        assert run.early_refused is not None and why in run.early_refused
        assert started.discarded and started.popen.poll() is not None
        assert dies(pid, 5.0)


def _held_back(arguments: str, wait: str) -> str:
    """A script that starts ``orchestrate run`` early (the write made), runs ``wait`` before the
    full path adopts the agent, then runs that path; ``arguments`` sets ``args`` from sys.argv."""
    return (
        "import sys, time, pathlib\n"
        "from orchestrate.cli import early\n" + arguments + "started = early.begin(args)\n"
        "assert started is not None and started.was_written, 'no early write'\n"
        + wait
        + "sys.argv = ['orchestrate', *args]\n"
        "from orchestrate.cli.main import main\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    early.discard()\n"
    )


def test_what_the_agent_asks_before_adoption_goes_through_the_approval_pipeline(home: Path) -> None:
    """The fake Claude asks to run a command as soon as it has read its prompt, long before the run
    adopts it (here held back until it has asked): the question waits in the pipe, and the adopted
    run answers it through its approval pipeline (--approvals deny: denied), never a pass."""
    tee = home / "printed"
    fake_claude(home, tee)
    log = home / "log.jsonl"
    args = [*run_args(home, "--output", "jsonl", "--record", str(log)), "tool please"]
    probe = _held_back(
        "tee, args = pathlib.Path(sys.argv[1]), sys.argv[2:]\n",
        "deadline = time.monotonic() + 20\n"
        "while b'can_use_tool' not in (tee.read_bytes() if tee.exists() else b''):\n"
        "    assert time.monotonic() < deadline, 'it never asked'\n"
        "    time.sleep(0.01)\n",
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tee), *args], capture_output=True, text=True, timeout=60
    )
    assert b"can_use_tool" in tee.read_bytes()
    out = done.stdout
    assert '"status":"denied"' in out, (out, done.stderr)
    assert "ran: echo original" not in out
    notes = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    approvals = [
        n for n in notes if n.get("type") == "event" and n.get("event", {}).get("type") == "approval"
    ]
    assert approvals and all(n["event"]["decision"] == "denied" for n in approvals), notes[-5:]
    assert "by policy" in approvals[0]["event"]["reason"]  # the pipeline's own words


def test_a_cli_killed_between_the_early_write_and_adoption_leaves_no_process(home: Path) -> None:
    """SIGKILL of orchestrate after it wrote the prompt and before any run adopted the agent: the
    supervisor sees its control socket close and kills the agent."""
    pid_file, got = recorder(home)
    probe = (
        "import sys\n"
        "from orchestrate.cli import early\n"
        "started = early.begin(sys.argv[1:])\n"
        "assert started is not None and started.was_written, 'no early write'\n"
        "print('written', flush=True)\n"
        "sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", probe, *run_args(home), "hello"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as owner:
        try:
            assert owner.stdout is not None and owner.stdout.readline().startswith(b"written")
            pid = int(wait_for(pid_file))
            assert b'"content":"hello"' in wait_for(got, b"hello")
            owner.send_signal(signal.SIGKILL)
        finally:
            owner.kill()
            owner.wait(10)
    assert dies(pid)


# --- the real Claude Code ------------------------------------------------------------------------


@pytest.mark.real_cli
@needs_cli("claude")
def test_the_real_claude_asks_before_acting_on_a_prompt_written_early(tmp_path: Path) -> None:
    """The pinned Claude Code, sent its prompt by the early start and left unadopted for a second
    after its model asked it to delete a file: the file is still there (it asked, and waited), and
    once adopted the run's policy denies it."""
    from orchestrate.testing import Scenario, ScriptedModelServer
    from orchestrate.testing.offline import Scratch, claude_offline_env

    steps = [
        {
            "tool": {
                "name": "Bash",
                "input": {"command": "rm -f keep.txt && echo removed", "description": "Rm"},
            }
        },
        {"text": "Result: {tool_result}"},
    ]
    probe = _held_back(
        "args = sys.argv[1:]\n",
        "print('written', flush=True)\nsys.stdin.readline()\n",
    )
    with (
        Scratch.create() as scratch,
        ScriptedModelServer(Scenario.from_obj({"steps": steps})) as server,
    ):
        (scratch.work / "keep.txt").write_text("precious")
        env = {
            **os.environ,
            **claude_offline_env(server, scratch),
            "ORCHESTRATE_BIN_PATH": str(CLI_BIN),  # the executor's own program, as the write wants
            "ORCHESTRATE_STORE": "off",
            "ORCHESTRATE_HOME": str(tmp_path),
            "ORCHESTRATE_EARLY": "write",
        }
        log = tmp_path / "log.jsonl"
        args = ["run", "-e", "claude-code", "--cwd", str(scratch.work), "--approvals", "deny"]
        args += ["--output", "jsonl", "--record", str(log), "--timeout", "90", "clean up"]
        with subprocess.Popen(
            [sys.executable, "-c", probe, *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as cli:
            assert cli.stdin is not None and cli.stdout is not None
            try:
                assert cli.stdout.readline().startswith(b"written")
                deadline = time.monotonic() + 60
                while not server.main_requests():  # it read the prompt and asked its model
                    assert time.monotonic() < deadline, "the CLI never asked its model"
                    time.sleep(0.05)
                time.sleep(1.0)  # the tool call came back; unadopted, nothing answers it
                assert (scratch.work / "keep.txt").read_text() == "precious"
                cli.stdin.write(b"go\n")
                cli.stdin.flush()
                out, err = cli.communicate(timeout=120)
            finally:
                cli.kill()
        assert (scratch.work / "keep.txt").read_text() == "precious"
        lines = [orjson.loads(line) for line in out.splitlines()]
        assert lines[-1]["outcome"] == "success", err
        assert '"status":"denied"' in out.decode()
        assert "clean up" in str(server.main_requests()[0]["body"]["messages"])
        records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
        started = datetime.fromisoformat(records[0]["started"]).timestamp()
        stdin = [r for r in records if r.get("type") == "chunk" and r["stream"] == "stdin"]
        assert stdin[0]["ts"] < started and b"clean up" in stdin[1]["data"].encode()


def test_a_run_whose_spec_differs_kills_the_early_agent_says_so_and_runs_its_own(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The full path computes another environment than the early start did (made so here): the
    agent that read its prompt early is killed at once, stderr says why, and the run starts its
    own agent, which answers as usual."""
    pids = home / "pids"
    command = f'{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLAUDE))} "$@"'
    claude_is(home, f"#!/bin/sh\necho $$ >> {shlex.quote(str(pids))}\nexec {command}\n")
    args = [*run_args(home, "--output", "jsonl"), "plain hello"]
    assert early.begin(args) is not None
    first = int(wait_for(pids).split()[0])
    real = ClaudeCodeExecutor.env_additions
    monkeypatch.setattr(
        ClaudeCodeExecutor, "env_additions", lambda self, task: {**real(self, task), "LATER": "1"}
    )
    with pytest.raises(SystemExit) as exit_:
        try:
            cli_main.main(args)
        finally:
            early.discard()
    assert exit_.value.code == 0
    out, err = capsys.readouterr()
    assert "had been sent the prompt" in err and "another command line" in err
    assert dies(first, 5.0)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2 and started[0] == first  # the run's own agent, then
    assert "hello from fake claude" in out and '"outcome":"success"' in out.splitlines()[-1]
