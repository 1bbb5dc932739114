"""Every executor ``orchestrate run`` starts early (cli/early.py's ``_EARLY_EXECUTORS``) builds its
agent's command line without the run's heavy modules.

The early start spawns the agent's supervisor ~50 ms after our start, then builds the agent's spec
with the executor's own code (``process_spec``) and sends it: whatever the executor's module imports
at its top delays the agent's start one to one.  An executor module importing ``orchestrate.task``
(pydantic), its normalizer (the entry model), the approvals or ``anyio`` sent opencode's command
line ~500 ms after our start instead of ~60 (strace, issue 16).  Here each early executor's spec is
built in a fresh interpreter, as ``orchestrate run -e NAME`` builds it, and the modules loaded then
are judged.

The interpreter runs with ``-S`` and this process's ``sys.path`` on PYTHONPATH: the packages are
found, but no ``.pth`` start-up hook runs (an editable install's finder loads pathlib, re and typing
in every python process; tests/test_early_spawn_imports.py), so what is judged is what our code
loads.  The control probe, loading the full executor first, sees the same modules: the check can fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrate.cli import early
from orchestrate.errors import ExecutorUnavailableError
from orchestrate.registry import _BUILTINS, default_registry

from .helpers import ROOT

# Never loaded while an early executor builds its spec: (module, why).  A package stands for its
# submodules.
NEVER = {
    "pydantic": "~150 ms: the models load after the spawn",
    "anyio": "the event loop, likewise",
    "asyncio": "likewise",
    "click": "the CLI, likewise",
    "orchestrate.task": "a pydantic model: the early start passes a plain stand-in",
    "orchestrate.entries": "the entry model (pydantic), loaded by every normalizer",
    "orchestrate.normalizers": "create_normalizer's, imported there",
    "orchestrate.approvals": "the approval pipeline, the run's",
    "orchestrate.peers": "the protocol peers, the run's",
    "orchestrate.run": "the run itself",
    "dataclasses": "imports inspect, ast, dis, tokenize: ~15 ms",
    "orjson": "~30 ms (it imports dataclasses, uuid, datetime, enum): only to write Codex's -c values",
    "re2": "the raw log's redactor, likewise",
    "subprocess": "threading, selectors: only to ask a CLI its version",
    "datetime": "only Gemini's session-file fix, which is not on the early path",
    "tomllib": "only to read Codex's config.toml for `orchestrate check`",
    "json": "json.decoder brings re: opencode's constant config is a literal",
    "pathlib": "with re, fnmatch, urllib.parse, ipaddress: ~5 ms",
    "typing": "~3 ms: the annotations are strings",
    "shutil": "bz2, lzma: find_program has its own which",
    "contextlib": "as in Claude Code's spec (tests/test_early_spawn_imports.py)",
    "importlib": "likewise (with warnings)",
    "warnings": "likewise",
    "shlex": "with re: ~13 ms; a plain --base-command is split without it (base.py)",
    "re": "~3 ms",
    "collections": "through re",
    "enum": "through re",
    "functools": "through re",
    "types": "through re",
}
PROBE = r"""
import sys
from orchestrate.cli import early
spec = early.early_spec(sys.argv[1:])
print("no early spec" if spec is None else spec.argv[0])
print("\n".join(sorted(sys.modules)))
"""


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every early executor's program on $ORCHESTRATE_BIN_PATH (empty scripts: nothing is run)."""
    directory = tmp_path_factory.mktemp("bin")
    for name in (*early._EARLY_EXECUTORS, "acp-agent"):
        program = default_registry.get(name).program if name != "acp-agent" else name
        if program:
            script = directory / program
            script.write_text("#!/bin/sh\n")
            script.chmod(0o755)
    return directory


def probe(name: str, bin_dir: Path, prelude: str = "") -> tuple[str, set[str]]:
    """The program of ``orchestrate run -e NAME``'s early spec, and the modules loaded once it is built."""
    args = ["run", "-e", name, "--approvals", "deny", "--cwd", str(bin_dir)]
    if not default_registry.get(name).program:  # any ACP agent: its command is given
        args += ["--base-command", f"{bin_dir / 'acp-agent'} --acp  -x"]
    path = [str(ROOT), *(p for p in sys.path if p and Path(p).resolve() != ROOT)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "ORCHESTRATE_BIN_PATH": str(bin_dir),
        "ORCHESTRATE_HOME": str(bin_dir / "home"),
    }
    done = subprocess.run(
        [sys.executable, "-S", "-c", prelude + PROBE, *args, "hi"],
        env=env,
        cwd=bin_dir,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    program, _, rest = done.stdout.partition("\n")
    return program, set(rest.split())


def loaded(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


@pytest.mark.parametrize("name", sorted(early._EARLY_EXECUTORS))
def test_an_early_executor_builds_its_spec_without_the_runs_modules(name: str, bin_dir: Path) -> None:
    program, modules = probe(name, bin_dir)
    # The early start applies (a spec, with our fake program): else the check would judge nothing.
    assert program == str(bin_dir / (default_registry.get(name).program or "acp-agent")), program
    assert "orchestrate" + _BUILTINS[name].partition(":")[0] in modules  # its own module, loaded
    found = {m: why for m, why in NEVER.items() if loaded(modules, m)}
    assert not found, f"loaded while {name}'s early spec was built: {found}"


def test_the_probe_sees_what_an_executor_imports(bin_dir: Path) -> None:
    """The control: modules loaded before the spec is built (as an executor's top-level imports
    would load them) are seen."""
    _, modules = probe("opencode", bin_dir, "import json, pathlib, typing\n")
    assert loaded(modules, "json") and loaded(modules, "pathlib") and loaded(modules, "typing")


def test_opencodes_permission_config_is_the_json_of_its_table() -> None:
    """The environment's config, written out so that the early start needs no json, is still
    ``json.dumps`` of the table it stands for, and the environment sends it."""
    import json

    from orchestrate.executors import opencode

    assert json.dumps(opencode.ASK_PERMISSIONS) == opencode.ASK_PERMISSIONS_JSON
    assert json.loads(opencode.ASK_PERMISSIONS_JSON) == opencode.ASK_PERMISSIONS
    env = opencode.OpenCodeExecutor().env_additions(early._Task("hi", "/"))  # type: ignore[arg-type]
    assert env[opencode.CONFIG_CONTENT_VARIABLE] == json.dumps(opencode.ASK_PERMISSIONS)


_COMMAND = st.text(
    st.one_of(
        st.sampled_from([" ", "\t", "\n", "\r", "\x0b", "\x0c", "\xa0", "\u3000", "\x1f", "'", '"']),
        st.sampled_from(["\\", "#", "a", "/", "-", "=", "é"]),
        st.characters(blacklist_categories=("Cs",)),
    ),
    max_size=30,
)


@settings(max_examples=400, deadline=None)
@given(command=_COMMAND)
def test_a_command_string_is_split_as_shlex_splits_it(command: str) -> None:
    """A --base-command with nothing to unquote is split without shlex (base.py): the words are
    shlex.split's whatever the string (quotes, escapes, tabs, newlines, Unicode spaces, control
    characters), and a string shlex refuses is refused the same way."""
    import shlex

    from orchestrate.executors.acp import AcpExecutor

    executor = AcpExecutor(early._Options(base_command=command))  # type: ignore[arg-type]
    if not command.strip():
        with pytest.raises(ExecutorUnavailableError):  # no command: no program of its own either
            executor.base_command()
        return
    try:
        expected = shlex.split(command)
    except ValueError:  # an unclosed quote, a trailing escape
        with pytest.raises(ValueError):
            executor.base_command()
        return
    assert executor.base_command() == expected
