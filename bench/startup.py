"""Time to first write: what importing orchestrate costs before a Claude run can start the agent.

Each measure is a fresh interpreter, best of ``--repeat`` runs, against the baseline of the same
interpreter doing nothing (``python -c pass``), measured in the same rounds:

- ``import orchestrate.cli.main``: what the ``orchestrate`` command imports before it parses options;
- ``claude path``: the CLI module, plus the Claude executor, its command line, its live driver and
  the run's recorder (everything a ``orchestrate run --executor claude-code`` imports before it
  spawns the CLI);
- which of the heavy optional packages (the ACP schema, pyte, the testing tools, the store) the
  Claude path imported: none should be.

Each interpreter runs in the measured checkout (``python -c`` puts the current directory first on
the module path).

    python bench/startup.py [--repeat 10] [--orchestrate PATH]   (PATH: a checkout to measure instead)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLAUDE_PATH = (
    "import orchestrate.cli.main, orchestrate.cli.recording, orchestrate\n"
    "from orchestrate.run.drivers import driver_for\n"
    "e = orchestrate.get_executor('claude-code')\n"
    "driver_for(e)\n"
    "e.process_spec(orchestrate.Task(prompt='x', cwd='.'), orchestrate.AutoDeny())\n"
)
HEAVY = (
    "acp",
    "pyte",
    "orchestrate.testing",
    "orchestrate.run.acp",
    "orchestrate.executors.terminal",
    # the store is opened on a thread once the agent has said something (cli/recording.py)
    "sqlalchemy",
    "orchestrate.store",
)
CASES = {
    "python -c pass": "pass",
    "import orchestrate.cli.main": "import orchestrate.cli.main",
    "claude path": CLAUDE_PATH,
}


def timed(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=env["PYTHONPATH"])
    return time.perf_counter() - start


def heavy_modules(env: dict[str, str]) -> list[str]:
    code = CLAUDE_PATH + "import sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=env["PYTHONPATH"],
    )
    loaded = out.stdout.split()
    return [h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in loaded)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--orchestrate", type=Path, default=ROOT, help="the checkout to import from")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.orchestrate), "ORCHESTRATE_BIN_PATH": "/bin"}
    best = dict.fromkeys(CASES, float("inf"))
    for _ in range(args.repeat):  # rounds interleave the cases: a busy moment hits all alike
        for name, code in CASES.items():
            best[name] = min(best[name], timed(code, env))
    base = best["python -c pass"]
    for name, seconds in best.items():
        extra = "" if name == "python -c pass" else f"  (+{(seconds - base) * 1e3:5.0f} ms over python)"
        print(f"{name:28} {seconds * 1e3:6.0f} ms{extra}")
    print("heavy modules on the claude path:", ", ".join(heavy_modules(env)) or "none")


if __name__ == "__main__":
    main()
