"""Time to spawn: what ``orchestrate run`` does before it starts the agent, and what it loads then.

Each measure is a fresh interpreter, best of ``--repeat`` runs, against the baseline of the same
interpreter doing nothing (``python -c pass``), measured in the same rounds:

- ``import orchestrate.cli.main``: what the ``orchestrate`` command imports before it parses options;
- ``run, to the spawn``: ``orchestrate run -e claude-code --output jsonl`` from its start to the
  moment it spawns the agent (the supervisor, in fact: an audit hook sees the spawn, notes the time
  on the system's monotonic clock and the CPU time used, and ends the process there; the CPU time
  is the figure a busy machine changes least);
- ``run, to the first entry``: the same run, with an agent that prints its first line at once (a
  shell standing in for Claude Code), to the first entry made of that line: everything orchestrate
  does before and after the spawn, with nothing of the agent's own start-up to hide it;
- which of the modules that only the agent's output needs (the normalizer, the driver and control
  peer, the entry models, rich and the views, the shell parser) or that a Claude run never needs
  (the ACP schema, pyte, the testing tools, the store) were loaded at the spawn: none should be.
  They load after it, while the agent starts up on another core (bench/first_entry.py).

    python bench/startup.py [--repeat 10] [--orchestrate PATH]   (PATH: a checkout to measure instead)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ["run", "-e", "claude-code", "--output", "jsonl", "--approvals", "deny"]
# Claude Code's first stream-json line, at once; then it waits for its input to end.
INSTANT_AGENT = (
    '/bin/sh -c \'echo "{\\"type\\":\\"system\\",\\"subtype\\":\\"init\\",'
    '\\"session_id\\":\\"s\\",\\"model\\":\\"m\\"}"; exec cat >/dev/null\' agent'
)
# Run `orchestrate ARGS...` (argv[1:]); at its first spawn, print the monotonic time and the
# modules loaded, and end there.
TO_SPAWN = """
import os, sys, time, runpy
def hook(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.fork"):
        now, cpu = time.monotonic(), time.process_time()
        sys.stdout.write(f"{now!r} {cpu!r}\\n" + "\\n".join(sorted(sys.modules)) + "\\n")
        sys.stdout.flush()
        os._exit(0)
sys.addaudithook(hook)
sys.argv = ["orchestrate", *sys.argv[1:]]
runpy.run_module("orchestrate", run_name="__main__", alter_sys=True)
"""
# Loaded before the spawn, they would delay the agent: each is loaded after it, or never on this path.
HEAVY = (
    # the early start (cli/early.py) spawns the agent before the CLI itself, the models and the
    # event loop are loaded: they load while the agent starts up
    "click",
    "pydantic",
    "anyio",
    "asyncio",
    "orchestrate.cli.main",
    "orchestrate.run",
    "orchestrate.approvals",
    "orchestrate.process.rawlog",
    "acp",
    "pyte",
    "orchestrate.testing",
    "orchestrate.run.acp",
    "orchestrate.executors.terminal",
    # the store is opened on a thread once the agent has said something (cli/recording.py)
    "sqlalchemy",
    "orchestrate.store",
    # what only the agent's output needs: loaded just after the spawn (run/handle.py, cli/main.py)
    "orchestrate.entries",
    "orchestrate.normalizers.base",
    "orchestrate.normalizers.claude_stream_json",
    "orchestrate.peers",
    "orchestrate.run.driver",
    "orchestrate.run.result",
    "orchestrate.cli.live",
    "orchestrate.cli.render",
    "orchestrate.cli.chat",
    "orchestrate.cli.failure",
    "rich",
    # the shell parser: loaded with the first command an approval must judge (approvals/facts.py);
    # the rules with a policy file (approvals/pipeline.py); the question's display and editor with
    # the first question (approvals/prompt.py)
    "tree_sitter",
    "orchestrate.approvals.shell",
    "orchestrate.approvals.policy",
    "orchestrate.approvals.display",
    "orchestrate.approvals.editor",
)


def timed(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=env["PYTHONPATH"])
    return time.perf_counter() - start


def to_spawn(env: dict[str, str], cwd: Path) -> tuple[float, float, list[str]]:
    """Seconds from the start of ``orchestrate run`` to its spawn, the CPU seconds it used by then
    (what a busy machine changes least), and the modules loaded by then."""
    argv = [sys.executable, "-c", TO_SPAWN, *RUN, "--base-command", "/bin/true", "hello"]
    start = time.monotonic()
    out = subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True, text=True).stdout
    spawned, cpu, *modules = out.split()
    return float(spawned) - start, float(cpu), modules


def to_first_entry(env: dict[str, str], cwd: Path) -> float:
    """Seconds from the start of ``orchestrate run`` to the first entry of an agent that answers at once."""
    argv = [sys.executable, "-m", "orchestrate", *RUN, "--base-command", INSTANT_AGENT, "hello"]
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    while b'"user_message"' in line:  # the prompt's own entry, ours, comes first
        line = proc.stdout.readline()
    took = time.perf_counter() - start
    proc.kill()
    proc.wait()
    if b'"system_message"' not in line:
        raise SystemExit(f"no entry from the agent: {line[:200]!r}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--orchestrate", type=Path, default=ROOT, help="the checkout to import from")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {
            **os.environ,
            "PYTHONPATH": str(args.orchestrate.resolve()),
            "ORCHESTRATE_BIN_PATH": "/bin",
            "ORCHESTRATE_HOME": home,
            "ORCHESTRATE_STORE": "off",
        }
        cwd = Path(home)
        loaded: list[str] = []
        cpu = [float("inf")]

        def spawn() -> float:
            seconds, used, loaded[:] = to_spawn(env, cwd)
            cpu[0] = min(cpu[0], used)
            return seconds

        cases = {
            "python -c pass": lambda: timed("pass", env),
            "import orchestrate.cli.main": lambda: timed("import orchestrate.cli.main", env),
            "run, to the spawn": spawn,
            "run, to the first entry": lambda: to_first_entry(env, cwd),
        }
        best = dict.fromkeys(cases, float("inf"))
        for _ in range(args.repeat):  # rounds interleave the cases: a busy moment hits all alike
            for name, case in cases.items():
                best[name] = min(best[name], case())
    base = best["python -c pass"]
    for name, seconds in best.items():
        extra = "" if name == "python -c pass" else f"  (+{(seconds - base) * 1e3:5.0f} ms over python)"
        print(f"{name:28} {seconds * 1e3:6.0f} ms{extra}")
    print(f"{'run, CPU used to the spawn':28} {cpu[0] * 1e3:6.0f} ms")
    print(f"modules loaded at the spawn: {len(loaded)}")
    heavy = [h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in loaded)]
    print("heavy modules before the spawn:", ", ".join(heavy) or "none")


if __name__ == "__main__":
    main()
