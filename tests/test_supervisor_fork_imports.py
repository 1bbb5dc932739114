"""A supervisor forked by the early start (process/prestart.py's ``_fork``) runs on in a copy of our
interpreter, with its flags: under ``python -X importtime`` or ``-v`` (or PYTHONPROFILEIMPORTTIME,
PYTHONVERBOSE) each module it imports later (``_ctypes``, for its prctl calls and clone3) was
reported on its stderr, which is the agent's: the lines went into the agent's raw log as the agent's
own.  Under those flags the early start spawns its supervisor (``python -I -S``: flags and
environment of its own) instead of forking it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrate.process import containment

from .helpers import FAKE_CLAUDE, ROOT, unrecorded_run

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux supervisor")

FAKE = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLAUDE))}"
# What either flag prints for an import: `import time: ... | _ctypes`, `import '_ctypes' # ...`.
SAID = ("import time:", "import '")


def agent_stderr(tmp_path: Path, flags: list[str], env: dict[str, str], agent_env: list[str]) -> str:
    """What the agent's stderr held, by its raw log, in an early-started ``orchestrate run`` of
    python ``flags`` and environment ``env`` (``agent_env``: the run's --env options)."""
    raw = tmp_path / "raw.jsonl"
    options = [f"--env={entry}" for entry in agent_env]
    run = ["run", "-e", "claude-code", "--base-command", FAKE, *options, "--cwd", str(tmp_path)]
    out = ["--approvals", "deny", "--output", "jsonl", "--record", str(raw)]
    unrecorded_run([sys.executable, *flags, "-m", "orchestrate", *run, *out, "hi"], tmp_path, env)
    chunks = [json.loads(line) for line in raw.read_text().splitlines()]
    assert chunks[0]["type"] == "header"
    return "".join(c["data"] for c in chunks if c.get("type") == "chunk" and c.get("stream") == "stderr")


@pytest.mark.parametrize(
    ("flags", "env", "agent_env"),
    [
        (["-X", "importtime"], {}, []),
        (["-v"], {}, []),
        # (The agent is a python too: the run's --env turns the variable off for it alone.)
        ([], {"PYTHONPROFILEIMPORTTIME": "1"}, ["PYTHONPROFILEIMPORTTIME="]),
        ([], {"PYTHONVERBOSE": "1"}, ["PYTHONVERBOSE="]),
    ],
    ids=["-X importtime", "-v", "PYTHONPROFILEIMPORTTIME", "PYTHONVERBOSE"],
)
def test_our_import_reports_never_reach_the_agents_stderr(
    tmp_path: Path, flags: list[str], env: dict[str, str], agent_env: list[str]
) -> None:
    stderr = agent_stderr(tmp_path, flags, env, agent_env)
    assert not [line for line in stderr.splitlines() if line.startswith(SAID)], stderr[-2000:]


STANDBY = """
from orchestrate.process import prestart
waiting = prestart.standby()
print(None if waiting is None else waiting.popen.forked)
if waiting is not None:
    waiting.discard()
"""


@pytest.mark.parametrize(
    ("flags", "env", "forked"),
    [
        ([], {}, "True"),  # the control: a plain python forks it
        (["-X", "importtime"], {}, "False"),
        (["-v"], {}, "False"),
        ([], {"PYTHONPROFILEIMPORTTIME": "1"}, "False"),
        ([], {"PYTHONVERBOSE": "1"}, "False"),
        (["-I"], {"PYTHONPROFILEIMPORTTIME": "1"}, "True"),  # ignored under -I (and -E)
    ],
)
def test_a_python_that_reports_imports_spawns_its_supervisor(
    flags: list[str], env: dict[str, str], forked: str
) -> None:
    """Spawned, not forked, under each of them: the early start still starts early."""
    if not containment.supervisor_usable():
        pytest.skip("no supervisor here")
    plain = {k: v for k, v in os.environ.items() if k not in ("PYTHONPROFILEIMPORTTIME", "PYTHONVERBOSE")}
    done = subprocess.run(
        # (-I ignores PYTHONPATH: the path is put first by hand)
        [sys.executable, *flags, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r})\n{STANDBY}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env={**plain, **env},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [forked]
