"""Review of the early handshake (review22): its promises under attack.

- Before adoption an agent is sent its protocol's exact ``initialize`` or nothing, whatever the
  executor, the options, the prompt and ORCHESTRATE_EARLY (Claude's prompt only with ``write``, the
  documented opt-in); a plugin's executor is not started early.
- The adopted handshake is answered once, whatever the agent does with it (answers before adoption,
  late, twice, with other ids, an error, a cut line, never; floods, asks, dies): the run proceeds or
  ends with its own error within the handshake's bound, never writes ``initialize`` again, and
  leaves no process; what the agent printed before adoption waited in a pipe of bounded size.
- What the run would not have written (other bytes, the other protocol, a cut or longer write, a
  prompt) is refused, and the agent is killed with its whole tree.
- The raw log and its replay are a run's that wrote the handshake itself (ORCHESTRATE_EARLY=spawn),
  but for made-up ids and times.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from orchestrate.approvals.simple import AutoDeny
from orchestrate.cli import early
from orchestrate.executors.acp import AcpExecutor
from orchestrate.executors.base import Executor
from orchestrate.executors.codex import CodexExecutor
from orchestrate.executors.options import ExecutorOptions
from orchestrate.peers.acp_opening import open_acp
from orchestrate.peers.claude_opening import ClaudeOpening, open_claude
from orchestrate.peers.codex_opening import codex_peer, open_codex
from orchestrate.peers.handshake import Handshake
from orchestrate.peers.jsonrpc import JsonRpcPeer
from orchestrate.process.prestart import Prestarted, prestart
from orchestrate.process.rawlog import read_raw_log
from orchestrate.registry import default_registry
from orchestrate.replay import replay
from orchestrate.run import acp as acp_driver
from orchestrate.run import codex as codex_driver
from orchestrate.run.early_opening import early_handshake
from orchestrate.run.handle import Run
from orchestrate.run.result import RunResult
from orchestrate.task import Task

from .helpers import (
    FAKE_ACP,
    FAKE_CODEX,
    FAST,
    FIXTURES,
    RECORDER,
    assert_nothing_survives,
    early_home,
    errors,
    install_program,
    marked,
    pid_alive,
)
from .test_early_write import dies, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the early start's supervisor: Linux")

HOSTILE = FIXTURES / "bin" / "hostile_handshake.py"
AGENTS = ("acp", "codex")
SECRET = "zebra-secret-words"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return early_home(tmp_path, monkeypatch)


def own_handshake(agent: str) -> Handshake:
    return open_codex() if agent == "codex" else open_acp()


install = install_program


# --- before adoption: the handshake or nothing ----------------------------------------------------

MODES = (None, "0", "1", "spawn", "write", "garbage", "", "off")


def _programs(home: Path) -> dict[str, str]:
    """Every built-in executor's program, as a recorder on the bin path (the generic ACP one by
    --base-command)."""
    names: dict[str, str] = {}
    for name in default_registry.names():
        if default_registry.sources.get(name) != "builtin":
            continue
        program = default_registry.create(name).program or "generic-agent"
        names[name] = program
        pid, got = home / f"{program}.pid", home / f"{program}.got"
        install(home, program, RECORDER.format(pid=shlex.quote(str(pid)), got=shlex.quote(str(got))))
    return names


@pytest.mark.parametrize("more", [[], ["--model", "m-1", "--env", "SOME_VAR=1", "--timeout", "30"]])
def test_before_adoption_an_agent_is_sent_its_handshake_or_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch, more: list[str]
) -> None:
    """Every built-in executor under every ORCHESTRATE_EARLY value (unset, 0, 1, spawn, write, and
    values it does not know): what its agent is sent before any run adopts it is exactly its
    protocol's ``initialize`` (Codex's app-server and every ACP agent, unless 0 or spawn) or
    nothing; never the prompt, but for Claude Code under ``write`` (its documented opt-in)."""
    programs = _programs(home)
    prompt = f'{SECRET} {{"id":1,"method":"initialize"}}'
    for name, program in sorted(programs.items()):
        for mode in MODES:
            if mode is None:
                monkeypatch.delenv("ORCHESTRATE_EARLY", raising=False)
            else:
                monkeypatch.setenv("ORCHESTRATE_EARLY", mode)
            chosen = ["-e", name] + (["--base-command", str(home / "bin" / program)] if name == "acp" else [])
            args = ["run", *chosen, "--cwd", str(home / "work"), "--approvals", "deny", *more, prompt]
            started = early.begin(args)
            try:
                written = b"" if started is None else b"".join(data for data, _ in started.written)
                assert started is None or started.was_written == bool(written), (name, mode)
                handshake = early_handshake(default_registry.create(name))
                off = mode is not None and mode.strip().lower() in early.OFF  # (0, off, false ...)
                if off or mode == "spawn" or handshake is None:
                    if (name, mode) == ("claude-code", "write") and written:
                        assert started is not None and isinstance(started.opening, ClaudeOpening)
                        assert started.opening.prompt == prompt  # (its request id is made up)
                        assert written == b"".join(started.opening.lines)
                    else:
                        assert written == b"", (name, mode, written[:200])
                else:
                    assert started is not None, (name, mode)  # (these all start early)
                    assert written == handshake.lines[0], (name, mode)
                    assert started.opening is not None and early.prompted(started) is False
                    got = home / f"{program}.got"
                    assert wait_for(got, written) == written  # the agent read it, and only it
                if (name, mode) != ("claude-code", "write"):
                    assert SECRET.encode() not in written
            finally:
                early.discard()
                for leftover in home.glob("*.got"):
                    leftover.unlink()
            assert early.take() is None


def test_a_plugin_executor_is_not_started_early(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An executor a plugin registers (here a Codex and an ACP subclass, under names of their own)
    is loaded with the rest of the run: nothing is spawned, nothing written, before the run."""

    class PluginCodex(CodexExecutor):
        name = "plugin-codex"

    class PluginAcp(AcpExecutor):
        name = "plugin-acp"

    install(home, "codex", RECORDER.format(pid=home / "p", got=home / "g"))
    for cls in (PluginCodex, PluginAcp):
        monkeypatch.setitem(default_registry._classes, cls.name, cls)
        monkeypatch.setitem(default_registry.sources, cls.name, "a-plugin")
        args = ["run", "-e", cls.name, "--base-command", str(home / "bin" / "codex"), "--approvals", "deny"]
        assert early.begin([*args, "hello"]) is None
        assert early.take() is None
    assert not (home / "p").exists()


# --- the answer ---------------------------------------------------------------------------------

BOUND = 2.0  # the handshake's own bound, made short here


def hostile(agent: str, home: Path, mode: str, **env: str) -> tuple[Executor, Task]:
    """The hostile agent in front of the fake one, and a task for it; what it reads goes to
    home/read, and home/mark is made once it has done what ``mode`` says."""
    fake = FAKE_CODEX if agent == "codex" else FAKE_ACP
    options = ExecutorOptions(
        base_command=[sys.executable, str(HOSTILE), sys.executable, str(fake)],
        env={"HOSTILE": mode, "HOSTILE_LOG": str(home / "read"), "HOSTILE_MARK": str(home / "mark"), **env},
    )
    executor: Executor = CodexExecutor(options) if agent == "codex" else AcpExecutor(options)
    return executor, Task(prompt=f"plain {SECRET}", cwd=home / "work")


def started_with_handshake(run: Run, agent: str) -> Prestarted:
    """The run's agent started early, and sent its handshake as the CLI's early start does."""
    started = prestart(run._spec)
    assert started is not None
    opening = early_handshake(run.executor)
    assert opening is not None and opening.lines == own_handshake(agent).lines
    assert started.write(opening.lines, opening)
    return started


def adopted_run(run: Run, within: float) -> RunResult:
    async def go() -> RunResult:
        with anyio.fail_after(within):
            async with run:
                return await run.wait()

    return anyio.run(go)


def stdin_records(path: Path) -> list[bytes]:
    _, records = read_raw_log(path)
    return [r.data for r in records if r.stream == "stdin"]


def initializes(lines: list[bytes]) -> int:
    return sum(b'"method":"initialize"' in line for line in lines)


def held(run: Run, result: RunResult, home: Path, agent: str) -> None:
    """What every adopted run keeps: one initialize, the early one, recorded first; the agent read
    it once; no process left; the raw log replays to the entries the run showed."""
    assert result.raw_log is not None
    written = stdin_records(result.raw_log)
    assert written[0] == own_handshake(agent).lines[0]
    assert initializes(written) == 1
    read = (home / "read").read_bytes().splitlines(keepends=True)
    assert initializes(read) == 1 and read[0] == written[0]
    assert_nothing_survives(run)
    normalizer = run.executor.create_normalizer()
    list(replay(result.raw_log, normalizer))
    assert normalizer.entries == result.entries


PROCEEDS = ("plain", "twice", "wrong-ids-then", "malformed-then", "late", "requests")
UNANSWERED = ("never", "wrong-id", "malformed")


@pytest.mark.parametrize("answered_before", [True, False])
@pytest.mark.parametrize("mode", [*PROCEEDS, *UNANSWERED, "error", "die", "die-after"])
@pytest.mark.parametrize("agent", AGENTS)
def test_an_adopted_handshake_is_answered_once_whatever_the_agent_does(
    home: Path, monkeypatch: pytest.MonkeyPatch, agent: str, mode: str, answered_before: bool
) -> None:
    """The agent answers (or not) before the run adopts it (``answered_before``: adopted only once
    it has) or while it starts: a run that is answered proceeds to success (extra answers, answers
    to ids we never sent and cut lines are only shown); an error answer, no answer within the
    handshake's bound, or an agent that dies end it as failed with its own error, in time, with no
    traceback; never a second initialize, never a process left."""
    if mode == "late" and answered_before:
        pytest.skip("late is an answer after the driver started")
    if mode in UNANSWERED:  # (the others keep theirs: two Pythons may take seconds to start here)
        monkeypatch.setattr(codex_driver, "_HANDSHAKE_TIMEOUT", BOUND)
        monkeypatch.setattr(acp_driver, "_STARTUP_TIMEOUT", BOUND)
    executor, task = hostile(agent, home, mode, FLOOD="1500")
    run = Run(executor, task.model_copy(update={"raw_log": home / "log.jsonl"}), AutoDeny(), shutdown=FAST)
    started = started_with_handshake(run, agent)
    if answered_before:  # (one that dies makes no mark, nor one whose requests fill its pipe)
        wait_for(home / "read" if mode in ("die", "requests") else home / "mark")
    assert run.adopt(started), run.early_refused
    result = adopted_run(run, within=60)
    held(run, result, home, agent)
    found = errors(result)
    if mode in PROCEEDS:
        assert result.outcome == "success", found
    else:
        assert result.outcome == "failed"
        codes = [code for code, _ in found]
        if mode in UNANSWERED:
            assert any(f"no answer to initialize within {BOUND:g} s" in m for _, m in found), found
        elif mode == "error":
            assert any("initialize failed" in m and "hostile refusal" in m for _, m in found), found
        else:
            assert "process_exited" in codes, found
        assert not any("Traceback" in m for _, m in found), found
    if mode == "requests":  # each of its 1500 requests got one answer, after adoption
        read = (home / "read").read_bytes()
        answered = re.findall(rb'"id":"(h\d+)"', read)
        assert len(answered) == len(set(answered)) == 1500
        assert b"method not found: hostile/ask" in read


@pytest.mark.parametrize("agent", AGENTS)
def test_what_a_flooding_agent_prints_before_adoption_waits_in_a_bounded_pipe(home: Path, agent: str) -> None:
    """An agent that floods stdout (3 MB of notices) as soon as it has the handshake blocks once
    its pipe is full: what it printed before adoption is held by the pipe alone (64 KiB here, at
    most the system's 1 MiB), not read into our memory; adopted, the run reads it all and goes on."""
    executor, task = hostile(agent, home, "flood", FLOOD="3000", HOSTILE_COUNT=str(home / "count"))
    run = Run(executor, task.model_copy(update={"raw_log": home / "log.jsonl"}), AutoDeny(), shutdown=FAST)
    started = started_with_handshake(run, agent)
    try:
        previous = -1
        deadline = time.monotonic() + 20
        while True:  # until the agent stops getting anything out
            time.sleep(0.3)
            now = int(wait_for(home / "count"))
            if now == previous:
                break
            previous = now
            assert time.monotonic() < deadline, "it never stopped printing"
        assert now <= (1 << 20) + (64 << 10) < 3000 * 1000
        assert not (home / "mark").exists()
    except BaseException:
        started.discard()
        raise
    assert run.adopt(started)
    result = adopted_run(run, within=60)
    assert result.outcome == "success", errors(result)
    assert int((home / "count").read_text()) > 3000 * 1000
    held(run, result, home, agent)


# --- refused: killed with its tree --------------------------------------------------------------

TREE = "#!/bin/sh\nsleep {mark} &\necho $$ > {pid}\ncat > {got}\nexec sleep 30\n"


def _other_bytes(agent: str) -> tuple[tuple[bytes, ...], object]:
    own = own_handshake(agent)
    changed = Handshake(own.peer, own.request_id, own.lines[0].replace(b"orchestrate", b"orchestrat3", 1))
    return changed.lines, changed


def _other_protocol(agent: str) -> tuple[tuple[bytes, ...], object]:
    other = own_handshake("acp" if agent == "codex" else "codex")
    return other.lines, other


def _two_lines(agent: str) -> tuple[tuple[bytes, ...], object]:
    own = own_handshake(agent)
    longer = Handshake(own.peer, own.request_id, own.lines[0])
    longer.lines = (own.lines[0], b'{"id":2,"method":"session/new","params":{}}\n')
    return longer.lines, longer


def _cut(agent: str) -> tuple[tuple[bytes, ...], object]:
    own = own_handshake(agent)
    return (own.lines[0][:25],), own  # what a write cut short leaves: the start of its line


def _unsaid(agent: str) -> tuple[tuple[bytes, ...], object]:
    return own_handshake(agent).lines, None  # bytes written with no opening to say what they were


def _a_prompt(agent: str) -> tuple[tuple[bytes, ...], object]:
    opening = open_claude(f"plain {SECRET}")
    return opening.lines, opening


@pytest.mark.parametrize("attack", [_other_bytes, _other_protocol, _two_lines, _cut, _unsaid, _a_prompt])
@pytest.mark.parametrize("agent", AGENTS)
def test_what_the_run_would_not_have_written_is_refused_and_the_tree_killed(
    home: Path, agent: str, attack: Any
) -> None:
    """Run.adopt of an agent (which started a child of its own) that was sent what this run's
    driver would not have written first: refused, and the agent and its child are gone."""
    program = home / "bin" / "agent"
    options = ExecutorOptions(base_command=[str(program)])
    executor: Executor = CodexExecutor(options) if agent == "codex" else AcpExecutor(options)
    _refused_and_killed(home, executor, *attack(agent))


class _CodexPlugin(CodexExecutor):
    name = "codex-plugin"


class _AcpOtherDriver(AcpExecutor):
    name = "acp-other-driver"
    driver = "prompt-on-stdin"


class _AcpPlugin(AcpExecutor):
    name = "acp-plugin"


@pytest.mark.parametrize("cls", [_CodexPlugin, _AcpOtherDriver])
def test_a_handshake_is_refused_by_an_executor_that_would_not_write_it(
    home: Path, cls: type[Executor]
) -> None:
    """The exact handshake of its protocol, to a run of a Codex subclass (it may open otherwise) or
    of an ACP executor whose driver is another: refused, the tree killed."""
    executor = cls(ExecutorOptions(base_command=[str(home / "bin" / "agent")]))
    handshake = open_codex() if issubclass(cls, CodexExecutor) else open_acp()
    _refused_and_killed(home, executor, handshake.lines, handshake)


def test_an_acp_subclass_with_the_acp_driver_takes_the_handshake_over(home: Path) -> None:
    """Every ACP executor is spoken to by the one driver, which opens with those very bytes: a
    plugin's subclass takes the handshake over as the built-in ones do, and writes it once."""
    fake = [sys.executable, str(HOSTILE), sys.executable, str(FAKE_ACP)]
    env = {"HOSTILE": "plain", "HOSTILE_LOG": str(home / "read"), "HOSTILE_MARK": str(home / "mark")}
    executor = _AcpPlugin(ExecutorOptions(base_command=fake, env=env))
    task = Task(prompt="plain hi", cwd=home / "work", raw_log=home / "log.jsonl")
    run = Run(executor, task, AutoDeny(), shutdown=FAST)
    assert run.adopt(started_with_handshake(run, "acp")), run.early_refused
    result = adopted_run(run, within=60)
    assert result.outcome == "success", errors(result)
    held(run, result, home, "acp")


def _refused_and_killed(home: Path, executor: Executor, lines: tuple[bytes, ...], opening: object) -> None:
    """``lines`` (for ``opening``) written to an agent that starts a child of its own: Run.adopt
    refuses it, and the agent and its child are gone."""
    mark = f"{3000 + uuid.uuid4().int % 1000}.{os.getpid()}"
    pid_file, got = home / "pid", home / "got"
    install(home, "agent", TREE.format(mark=mark, pid=pid_file, got=got))
    run = Run(executor, Task(prompt=f"plain {SECRET}", cwd=home / "work"), AutoDeny(), shutdown=FAST)
    started = prestart(run._spec)
    assert started is not None
    assert started.write(lines, opening)
    pid = int(wait_for(pid_file))
    wait_for(got, lines[-1][-10:])
    deadline = time.monotonic() + 10
    while not marked(mark):
        assert time.monotonic() < deadline, "its child never started"
        time.sleep(0.02)
    assert not run.adopt(started)
    assert run.early_refused
    assert started.discarded and dies(pid, 5.0)
    deadline = time.monotonic() + 5
    while marked(mark):
        assert time.monotonic() < deadline, "its child outlived it"
        time.sleep(0.02)
    assert not pid_alive(pid)


# --- the raw log and its replay -----------------------------------------------------------------

_MADE_UP = re.compile(rb"\b([a-z]+)_[0-9a-f]{6,}\b")  # the fakes' ids: thread_, turn_, sess_, u_ ...
_NUMBERS = re.compile(rb'"(emittedAtMs|ts|durationMs)": ?[0-9.]+')


def _masked(data: bytes) -> bytes:
    return _NUMBERS.sub(rb'"\1":0', _MADE_UP.sub(rb"\1_X", data))


def _entries(entries: list[Any]) -> list[bytes]:
    dumped = []
    for entry in entries:
        obj = entry if isinstance(entry, dict) else entry.to_json_dict()
        obj.pop("timestamp", None)
        dumped.append(_masked(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)))
    return dumped


@pytest.mark.parametrize("more", [[], ["--resume", "missing", "--resume-fallback"]])
@pytest.mark.parametrize("agent", AGENTS)
def test_the_raw_log_and_its_replay_are_those_of_a_run_that_wrote_it_itself(
    home: Path, agent: str, more: list[str]
) -> None:
    """Through the CLI with the fake agent: the raw log of a run that took the early handshake over
    holds, stream by stream, the lines of one whose run wrote it (ORCHESTRATE_EARLY=spawn), its
    events the same, and both replay to the same entries, which are the ones the live run
    showed; but for made-up ids and times.  A session not found and started afresh
    (--resume-fallback): the fresh agent's run writes its own initialize, in both."""
    fake = FAKE_CODEX if agent == "codex" else FAKE_ACP
    install(home, "agent", f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(fake))} "$@"\n')
    chosen = ["-e", agent, "--base-command", str(home / "bin" / "agent")]
    executor = default_registry.create(chosen[1])
    seen: dict[str, Any] = {}
    for mode in ("1", "spawn"):
        log = home / f"log-{mode}.jsonl"
        args = [*chosen, "--cwd", str(home / "work"), "--approvals", "deny", "--output", "jsonl", *more]
        done = subprocess.run(
            [sys.executable, "-m", "orchestrate", "run", *args, "--record", str(log), "plain hi"],
            capture_output=True,
            timeout=60,
            env={**os.environ, "ORCHESTRATE_EARLY": mode},
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        header, records = read_raw_log(log)
        assert header is not None
        streams: dict[str, list[bytes]] = {}
        kinds, events = [], []
        for record in records:
            if record.stream is not None:
                streams.setdefault(record.stream, []).append(record.data)
                kinds.append(record.stream)
            else:
                events.append(_masked(orjson.dumps(record.event)))
        lines = {
            name: [_masked(line) for line in b"".join(chunks).splitlines()]
            for name, chunks in streams.items()
        }
        normalizer = executor.create_normalizer()
        list(replay(log, normalizer))
        live: dict[int, Any] = {}
        for out in done.stdout.splitlines():
            patch = orjson.loads(out)
            if "entry" in patch:
                live[patch["index"]] = patch["entry"]
        assert _entries(normalizer.entries) == _entries([live[i] for i in sorted(live)])
        seen[mode] = (lines, events, kinds[0], _entries(normalizer.entries))
        assert initializes(lines["stdin"]) == (2 if more else 1)  # (one an attempt)
    assert seen["1"] == seen["spawn"]
    assert seen["1"][2] == "stdin"  # the handshake first, before anything it printed


# --- the driver's state: its own, not the opening's ---------------------------------------------


def _odd(agent: str) -> Handshake:
    """The handshake's very bytes, carried by a peer whose state is not what writing them leaves:
    its request id says 7, its peer sent two other requests and speaks the other dialect."""
    own = own_handshake(agent)
    peer = codex_peer() if agent == "acp" else JsonRpcPeer()
    peer.request("other/one")
    peer.request("other/two")
    return Handshake(peer, 7, own.lines[0])


@pytest.mark.parametrize("agent", AGENTS)
def test_a_taken_over_handshake_leaves_the_driver_in_the_state_its_own_write_would(
    home: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    """What the driver takes over is the bytes (Run.adopt compared them with its own): its peer is
    then where writing them itself leaves it, whatever the opening object says besides (another
    request id, a peer with other requests pending, the other protocol's dialect). Were the
    opening's state taken, the answer to id 1 would be waited for as id 7 (no answer within the
    bound) and the next requests numbered and shaped otherwise than a run that wrote it itself."""
    monkeypatch.setattr(codex_driver, "_HANDSHAKE_TIMEOUT", 5.0)
    monkeypatch.setattr(acp_driver, "_STARTUP_TIMEOUT", 5.0)
    executor, task = hostile(agent, home, "plain")
    written = {}
    for how in ("odd", "itself"):
        log = home / f"log-{how}.jsonl"
        (home / "read").unlink(missing_ok=True)
        run = Run(executor, task.model_copy(update={"raw_log": log}), AutoDeny(), shutdown=FAST)
        if how == "odd":
            started = prestart(run._spec)
            assert started is not None
            odd = _odd(agent)
            assert started.write(odd.lines, odd)
            assert run.adopt(started), run.early_refused
        result = adopted_run(run, within=60)
        assert result.outcome == "success", errors(result)
        written[how] = [_masked(line) for line in stdin_records(log)]
        assert_nothing_survives(run)
    assert written["odd"] == written["itself"]


@pytest.mark.parametrize("agent", AGENTS)
def test_a_cli_killed_after_the_handshake_leaves_no_process(home: Path, agent: str) -> None:
    """SIGKILL of orchestrate once it has written the handshake, before any run adopted the agent
    (which started a child of its own): the supervisor sees its control socket close and kills the
    whole tree."""
    mark = f"{3000 + uuid.uuid4().int % 1000}.{os.getpid()}"
    pid_file, got = home / "pid", home / "got"
    program = install(home, "agent", TREE.format(mark=mark, pid=pid_file, got=got))
    install(home, "codex", f'#!/bin/sh\nexec {shlex.quote(str(program))} "$@"\n')
    chosen = ["-e", "codex"] if agent == "codex" else ["-e", "acp", "--base-command", str(program)]
    probe = (
        "import sys\n"
        "from orchestrate.cli import early\n"
        "started = early.begin(sys.argv[1:])\n"
        "assert started is not None and started.was_written, 'no handshake'\n"
        "print('written', flush=True)\n"
        "sys.stdin.read()\n"
    )
    args = ["run", *chosen, "--cwd", str(home / "work"), "--approvals", "deny", "hello"]
    with subprocess.Popen(
        [sys.executable, "-c", probe, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as owner:
        try:
            assert owner.stdout is not None and owner.stdout.readline().startswith(b"written")
            pid = int(wait_for(pid_file))
            assert wait_for(got, b"\n") == own_handshake(agent).lines[0]
            deadline = time.monotonic() + 10
            while not marked(mark):
                assert time.monotonic() < deadline, "its child never started"
                time.sleep(0.02)
            owner.kill()
        finally:
            owner.kill()
            owner.wait(10)
    assert dies(pid)
    deadline = time.monotonic() + 10
    while marked(mark):
        assert time.monotonic() < deadline, "its child outlived it"
        time.sleep(0.02)
