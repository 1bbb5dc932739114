"""Time to first entry: ``orchestrate run`` against the CLI it runs, started the same way.

Both sides are fresh processes, timed from spawn to their first line on stdout, against the same
scripted model server (no network, no API key), in alternating rounds so the machine's noise falls
on both:

- ``cli alone``: the exact command line and environment orchestrate would use for the agent (its
  executor's ``process_spec``), with the first user message written to its stdin at once; timed to
  its first line, and to its first line that orchestrate makes an entry of (the executor's own
  normalizer decides, in this process, after the clock has stopped): Claude Code's first line is
  ``session_state_changed`` (asked for by orchestrate's environment), which no entry shows, and
  its ``init`` (the first entry) comes after it;
- ``orchestrate run``: ``python -m orchestrate run -e EXECUTOR --output jsonl`` with the same
  environment, whose first line made of the agent's output is timed (the prompt's own entry
  comes earlier and is skipped); the run is recorded in a fresh store, as a user's run is.

The figure is the difference of the medians (the issue's target: within 0.1 s) and their ratio,
against the CLI's own first entry-making line (and, for comparison, against its first line).

    python bench/first_entry.py [--executor claude-code] [--rounds 7] [--orchestrate PATH ...]
                                [--python PYTHON ...] [--script]

With ``--orchestrate`` (repeatable) each checkout's ``orchestrate run`` is timed in the same rounds,
against the same CLI-alone times: two branches compared back to back on a noisy machine.  Each is
run by the interpreter of the same rank in ``--python`` (repeatable; default: the one running this),
so two installs compare too: a venv's start-up (its ``site``, an editable install's import hook) is
part of every run's time (the checkout is found first, by ``PYTHONPATH``, whatever the venv has
installed).  With ``--script`` each run is the ``orchestrate`` command installed beside its
interpreter (what a user types: the console script, which imports ``orchestrate.cli.early`` itself)
instead of ``python -m orchestrate`` (whose ``runpy`` imports importlib.util, contextlib,
collections and functools first: ~4 ms that the command does not spend).  With
``--late``, each checkout is also timed with its early start off (``ORCHESTRATE_EARLY=0``: the agent
spawned only once the CLI, the models and the event loop are loaded) and with the early write
(``ORCHESTRATE_EARLY=write``: the prompt written right after the early spawn, where the agent asks
before acting; the default spawns early and lets the run write it), in the same rounds.

The CPU time each ``orchestrate run`` used up to its first entry is reported too (its median): on a
machine with no free core, our work and the agent's start-up take turns, and the wall time follows
the sum.

Each checkout's modules are run from compiled bytecode, as an installed package's are: a cache of
its own (``PYTHONPYCACHEPREFIX``, in a temporary directory, filled by one whole untimed run first,
which also leaves there the code the command keeps from one start to the next: cli/code_cache.py), so
neither ``PYTHONDONTWRITEBYTECODE`` in the environment nor a stale ``__pycache__`` in a checkout
makes every timed run compile the package again (about 60 modules: 250-300 ms of CPU on the 2-core
machine of bench/README.md).  ``--bytecode-as-is`` leaves the environment's settings as they are
(the sessions that measured before this option had ``PYTHONDONTWRITEBYTECODE=1``: every checkout
whose ``__pycache__`` was missing or stale was compiled at every run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrate import AutoDeny, Task, get_executor  # noqa: E402
from orchestrate.testing import offline  # noqa: E402
from orchestrate.testing.model_server import ScriptedModelServer  # noqa: E402
from orchestrate.testing.offline import Scratch  # noqa: E402
from orchestrate.testing.scenario import Scenario  # noqa: E402

# Each CLI against the scripted model server, as the real-CLI tests run it (claude-code-acp and
# codex-acp are the adapters over the same CLIs' settings).
OFFLINE: dict[str, Callable[[ScriptedModelServer, Scratch], dict[str, str]]] = {
    "claude-code": offline.claude_offline_env,
    "claude-code-acp": offline.claude_offline_env,
    "codex": offline.codex_offline_env,
    "codex-acp": offline.codex_offline_env,
    "codex-exec": offline.codex_offline_env,
    "gemini": offline.gemini_offline_env,
    "qwen": offline.qwen_offline_env,
    "opencode": offline.opencode_offline_env,
    "copilot": offline.copilot_offline_env,
    "droid": offline.droid_offline_env,
}

PROMPT = "Say hello."
SCENARIO = {"steps": [{"text": "Hello."}]}
# orchestrate's first entry is the prompt it wrote itself, before the agent printed anything: the
# comparison starts at the first entry made of the agent's output.
_OWN_PROMPT = b'"kind":"user_message"'


def first_line(
    argv: list[str], env: dict[str, str], cwd: Path, stdin: bytes | None, skip: bytes = b""
) -> tuple[float, float]:
    """Seconds from spawn to the first stdout line without ``skip`` in it (the process is then
    killed), and the CPU seconds the process itself had used by then (from /proc)."""
    times, cpu = _first_lines(argv, env, cwd, stdin, lambda line: bool(skip) and skip in line)
    return times[0], cpu


def _first_lines(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    stdin: bytes | Conversation | None,
    skip: Callable[[bytes], bool],
    entry: Callable[[bytes], bool] | None = None,
) -> tuple[tuple[float, float], float]:
    """Seconds from spawn to the first stdout line ``skip`` does not want, and to the first line
    ``entry`` says makes an entry (the same, without ``entry``); and the CPU the process had used
    by the first.  ``stdin`` is written at once, or held as a :class:`Conversation` holds it."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    conversation = (
        stdin if isinstance(stdin, Conversation) else Conversation([(stdin or b"", frozenset())], {})
    )
    lines = conversation.talk(proc.stdin, proc.stdout)
    line = next(lines, b"")
    while line and skip(line):
        line = next(lines, b"")
    took = took_entry = time.perf_counter() - start
    cpu = _cpu_seconds(proc.pid)
    while entry is not None and line and not entry(line):  # (judging takes well under a ms)
        line = next(lines, b"")
        took_entry = time.perf_counter() - start
    proc.kill()
    proc.wait()
    if not line:
        raise SystemExit(f"no output from {argv[0]}")
    return (took, took_entry), cpu


def _answer(line: bytes) -> dict[str, Any] | None:
    """``line`` if it is a JSON-RPC answer (an id and a result or an error, no method)."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    is_answer = type(message) is dict and "id" in message and "method" not in message
    return message if is_answer and ("result" in message or "error" in message) else None


def _made_up(logged: object, live: object, into: dict[str, str]) -> None:
    """The strings the agent made up (ids of sessions, threads, turns): where ``logged`` and
    ``live``, the same answer in two runs, hold different strings of 8 characters or more."""
    if type(logged) is dict and type(live) is dict:
        for key, value in logged.items():
            if key in live:
                _made_up(value, live[key], into)
    elif type(logged) is list and type(live) is list:
        for a, b in zip(logged, live, strict=False):
            _made_up(a, b, into)
    elif type(logged) is str and type(live) is str and logged != live and len(logged) >= 8:
        into[logged] = live


class Conversation:
    """What orchestrate wrote to its agent in one run of its own (its raw log's stdin records), to be
    written to the CLI alone the same way: each write once the CLI has answered every JSON-RPC
    request that orchestrate had seen answered before making it, with what the agent made up in
    those answers (a session's id, a thread's) replaced by the new run's own.  The least a client
    of the protocol does, with the requests and capabilities orchestrate sends."""

    def __init__(self, steps: list[tuple[bytes, frozenset[object]]], answers: dict[object, object]) -> None:
        self.steps = steps
        self.answers = answers

    @classmethod
    def from_raw_log(cls, path: Path) -> Conversation:
        steps: list[tuple[bytes, frozenset[object]]] = []
        answers: dict[object, object] = {}
        pending = b""
        with path.open("rb") as log:
            for raw in log:
                record = orjson.loads(raw)
                if record.get("type") != "chunk":
                    continue
                data = record["data"].encode()
                if record["stream"] == "stdin":
                    steps.append((data, frozenset(answers)))
                elif record["stream"] == "stdout":
                    *whole, pending = (pending + data).split(b"\n")
                    for line in whole:
                        message = _answer(line)
                        if message is not None:
                            answers[message["id"]] = message
        if not steps:
            raise SystemExit(f"{path}: orchestrate wrote nothing to its agent")
        return cls(steps, answers)

    def talk(self, stdin: IO[bytes], stdout: IO[bytes]) -> Iterator[bytes]:
        """The agent's stdout lines, writing each step once what it waits for has been answered."""
        live: dict[object, object] = {}
        renamed: dict[str, str] = {}
        steps = list(self.steps)
        while True:
            while steps and steps[0][1].issubset(live):
                data, needs = steps.pop(0)
                for answered in needs:
                    _made_up(self.answers[answered], live[answered], renamed)
                for logged, new in renamed.items():
                    data = data.replace(logged.encode(), new.encode())
                if data:
                    stdin.write(data)
                    stdin.flush()
            line = stdout.readline()
            if not line:
                return
            message = _answer(line)
            if message is not None:
                live[message["id"]] = message
            yield line


def makes_entry(executor: str) -> Callable[[bytes], bool]:
    """Whether a stdout line of the CLI alone would be an entry of orchestrate's: its normalizer
    (a fresh one per line, so each is judged alone; the prompt's own entry is not counted)."""

    def judge(line: bytes) -> bool:
        normalizer = get_executor(executor).create_normalizer()
        _, patches = normalizer.feed_wire(line, "stdout", None, None)
        return bool(patches)

    judge(b"{}\n")  # its modules loaded now, not while a CLI is timed
    return judge


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` itself (not its children), from /proc/PID/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _bytecode_env(cache: Path | None) -> dict[str, str]:
    """This process's environment, with bytecode written to and read from ``cache`` (None: the
    environment's own settings, whatever they are)."""
    if cache is None:
        return dict(os.environ)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def cli_alone(executor: str, task: Task) -> tuple[list[str], dict[str, str], bytes | None]:
    """The CLI's command line and environment as orchestrate makes them; for Claude Code, its first
    message, written at once (for the others, what orchestrate writes: :class:`Conversation`)."""
    spec = get_executor(executor).process_spec(task, AutoDeny())
    if executor != "claude-code":
        return list(spec.argv), dict(spec.env), None
    message = {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": PROMPT}]}}
    return list(spec.argv), dict(spec.env), orjson.dumps(message) + b"\n"


def conversation_of(argv: list[str], env: dict[str, str], cwd: Path, home: Path) -> Conversation:
    """What ``orchestrate run`` (``argv``) writes to its agent: one whole run, untimed, its raw log
    read (the newest under ``home``)."""
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=300)
    logs = sorted((home / "runs").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    if done.returncode != 0 or not logs:
        tail = done.stdout.decode(errors="replace")[-500:] + done.stderr.decode(errors="replace")[-500:]
        raise SystemExit(f"the untimed run to learn the conversation failed ({done.returncode}):\n{tail}")
    return Conversation.from_raw_log(logs[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--executor", default="claude-code", choices=sorted(OFFLINE))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--late", action="store_true", help="also time with ORCHESTRATE_EARLY=0")
    parser.add_argument(
        "--bytecode-as-is",
        dest="as_is",
        action="store_true",
        help="no cache of our own: the environment's bytecode settings (see above)",
    )
    parser.add_argument(
        "--orchestrate",
        type=Path,
        action="append",
        help="a checkout whose `orchestrate run` is timed (repeatable; default: this one)",
    )
    parser.add_argument(
        "--python",
        type=Path,
        action="append",
        default=[],
        help="the interpreter (a venv's bin/python) of the --orchestrate of the same rank "
        "(repeatable; default: this one)",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="also time each checkout's runs handed to its own `orchestrate warm` server",
    )
    parser.add_argument(
        "--script",
        action="store_true",
        help="run the `orchestrate` command beside each interpreter, not `python -m orchestrate`",
    )
    args = parser.parse_args()
    checkouts: list[Path] = [p.resolve() for p in args.orchestrate or [ROOT]]
    if len(args.python) > len(checkouts):
        parser.error("more --python than --orchestrate: one interpreter per checkout, in their order")
    # (not resolved: a venv's python is a symlink to the base interpreter, and the venv is its folder)
    pythons: list[Path] = [*args.python, *[Path(sys.executable)] * (len(checkouts) - len(args.python))]
    for python in pythons:
        program = python.parent / "orchestrate" if args.script else python
        if not os.access(program, os.X_OK):
            parser.error(f"{program} is not an executable")

    with (
        Scratch.create(prefix="orchestrate-bench-") as scratch,
        ScriptedModelServer(Scenario.from_obj(SCENARIO)) as server,
    ):
        agent_env = OFFLINE[args.executor](server, scratch)
        task = Task(prompt=PROMPT, cwd=scratch.work, env=agent_env)
        argv, env, message = cli_alone(args.executor, task)
        run_args = ["run", "-e", args.executor, "--output", "jsonl"]
        run_args += ["--approvals", "deny", "--cwd", str(scratch.work), PROMPT]

        def ours(index: int) -> list[str]:
            python = pythons[index]
            if args.script:
                return [str(python.parent / "orchestrate"), *run_args]
            return [str(python), "-m", "orchestrate", *run_args]

        alone: list[float] = []
        alone_entry: list[float] = []
        judge = makes_entry(args.executor)
        modes = ("1", "write", "0") if args.late else ("1",)
        if args.warm:
            modes = (*modes, "warm")
        # (by rank: the same checkout may come twice, with two interpreters)
        variants = [(i, early) for i in range(len(checkouts)) for early in modes]
        through: dict[tuple[int, str], list[tuple[float, float]]] = {v: [] for v in variants}
        with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as caches:

            def env_of(index: int, early: str) -> dict[str, str]:
                warm = {"ORCHESTRATE_WARM": "0"}  # a server the user runs is not ours to time
                if early == "warm":
                    warm = {"ORCHESTRATE_WARM_SOCKET": str(Path(caches, f"warm{index}", "warm.sock"))}
                return {
                    **_bytecode_env(None if args.as_is else Path(caches, str(index))),
                    **agent_env,
                    "ORCHESTRATE_HOME": home,
                    "PYTHONPATH": str(checkouts[index]),
                    "ORCHESTRATE_EARLY": "1" if early == "warm" else early,
                    **warm,
                }

            # Each checkout's caches filled by one whole run, untimed: its bytecode, and the code
            # the command keeps at its exit (cli/code_cache.py), as a user's second run finds them.
            learned = [
                conversation_of(ours(index), env_of(index, "1"), scratch.work, Path(home))
                for index in range(1 if args.as_is else len(checkouts))
            ]
            stdin: bytes | Conversation = message if message is not None else learned[0]
            servers = [
                _warm_server(ours(index)[0], env_of(index, "warm"), args.script)
                for index in (range(len(checkouts)) if args.warm else ())
            ]
            load_before = os.getloadavg()[0]
            for _ in range(args.rounds):
                (took, took_entry), _ = _first_lines(argv, env, scratch.work, stdin, lambda _: False, judge)
                alone.append(took)
                alone_entry.append(took_entry)
                for index, early in variants:
                    through[index, early].append(
                        first_line(ours(index), env_of(index, early), scratch.work, None, _OWN_PROMPT)
                    )
            for server in servers:
                server.terminate()
                server.wait(30)
    first = statistics.median(alone)
    a = statistics.median(alone_entry)
    bytecode = "as the environment says" if args.as_is else "cached"
    print(
        f"executor: {args.executor}, rounds: {args.rounds}, load average: {load_before:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end, bytecode: {bytecode}"
    )
    print(f"cli alone, first line:        median {first * 1000:7.0f} ms  (min {min(alone) * 1000:.0f})")
    print(f"cli alone, first entry line:  median {a * 1000:7.0f} ms  (min {min(alone_entry) * 1000:.0f})")
    print(f"orchestrate run as: {'the orchestrate command' if args.script else 'python -m orchestrate'}")
    for (index, early), runs in through.items():
        times = [t for t, _ in runs]
        t = statistics.median(times)
        cpu = statistics.median(c for _, c in runs)
        label = "" if len(checkouts) == 1 else f"{checkouts[index]} (python: {pythons[index]})"
        if args.late:
            label += {
                "1": " early start (the default: agent spawned early, prompt written by the run)",
                "write": " early start with the early write (ORCHESTRATE_EARLY=write)",
                "0": " early start off (ORCHESTRATE_EARLY=0)",
                "warm": " handed to a warm server (orchestrate warm)",
            }[early]
        elif early == "warm":
            label += " handed to a warm server (orchestrate warm)"
        if label:
            print(f"{label.strip()}:")
        print(
            f"orchestrate run, first entry: median {t * 1000:7.0f} ms  (min {min(times) * 1000:.0f}), "
            f"CPU {cpu * 1000:.0f} ms"
        )
        print(
            f"added: {(t - a) * 1000:+.0f} ms   ratio: {t / a:.2f}x   "
            f"(over the CLI's first line: {(t - first) * 1000:+.0f} ms)"
        )


def _warm_server(command: str, env: dict[str, str], script: bool) -> subprocess.Popen[bytes]:
    """``orchestrate warm`` on the socket ``env`` names, once it listens (its directory made 0700)."""
    sock = Path(env["ORCHESTRATE_WARM_SOCKET"])
    sock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    argv = [command, "warm"] if script else [command, "-m", "orchestrate", "warm"]
    # (started in its socket's directory: `python -m` puts the working directory first on sys.path)
    server = subprocess.Popen(
        argv, env=env, cwd=sock.parent, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert server.stderr is not None
    line = server.stderr.readline()  # "listening on ...", or why not
    if b"listening" not in line:
        server.kill()
        raise SystemExit(f"orchestrate warm did not start: {line.decode(errors='replace')}")
    return server


if __name__ == "__main__":
    main()
