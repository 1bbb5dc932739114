"""What ``orchestrate run -e claude-code`` has loaded when it spawns its agent's supervisor and when
it sends it the agent's command line (the early start, cli/early.py): at the spawn, not even the
executor's code; at the send, only the executor's code and the spawn's own modules.  Everything
imported before that send delays the agent's start-up, one to one; ``dataclasses`` (with
``inspect``, ``ast``, ``dis`` and ``tokenize``) cost about 15 ms there, ``shutil`` (with ``bz2``
and ``lzma``) about 4.

The probe is honest: a real ``orchestrate`` process (as the installed command starts it), run through
a wrapper that installs an audit hook (``sys.addaudithook``) and notes ``sys.modules`` at the first
``os.fork``, ``os.posix_spawn`` or ``subprocess.Popen`` event (the early start forks its supervisor),
which the interpreter raises inside the spawn itself, just before the fork.  The wrapper imports
nothing the check looks for (it writes with ``os`` alone), and the same probe with the early start
off sees the full CLI loaded at its first spawn: the check can fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import ROOT

# The agent is a `claude` on ORCHESTRATE_BIN_PATH that ends at once (the run then ends too: what it
# loaded after the spawn is not judged); found as a user's is, not given by --base-command, whose
# string shlex splits (shlex imports re, enum, collections: as any run given one string does).
RUN = ["run", "-e", "claude-code", "--output", "jsonl", "--approvals", "deny", "hello"]

# Run `orchestrate ARGS...`; at the first spawn, write its argv (NUL-separated) and the modules
# loaded (one a line) to $AT_SPAWN_OUT; when the supervisor is sent what to start (the early start's
# Launch.send, wrapped at that first spawn without importing anything), the modules loaded then to
# $AT_SPAWN_OUT.send.
AT_SPAWN = r"""
import os, sys
out = os.environ["AT_SPAWN_OUT"]
seen = []

def note(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, text.encode())
    os.close(fd)

def hook(event, args):
    if event not in ("subprocess.Popen", "os.posix_spawn", "os.fork") or seen:
        return
    seen.append(True)
    argv = ["(fork)"] if event == "os.fork" else [os.fsdecode(a) for a in args[1]]
    note(out, "\0".join(argv) + "\n" + "\n".join(sorted(sys.modules)) + "\n")
    containment = sys.modules.get("orchestrate.process.containment")
    if containment is not None:
        send = containment.Launch.send
        def noted(self):
            note(out + ".send", "\n".join(sorted(sys.modules)) + "\n")
            return send(self)
        containment.Launch.send = noted

sys.addaudithook(hook)
sys.argv = ["orchestrate", *sys.argv[1:]]
# As the installed `orchestrate` command does (runpy, for `python -m`, imports contextlib, functools,
# importlib.util and more before our code runs, which would hide ours).
from orchestrate.cli.early import main
main()
"""

# Not loaded when the agent is spawned early: (module, why).  A package stands for its submodules.
NOT_BEFORE_THE_SPAWN = {
    "dataclasses": "imports inspect; the early path's records are process/record.py's",
    "inspect": "ast, dis, tokenize: ~12 ms",
    "ast": "through inspect",
    "shutil": "bz2, lzma: find_program has its own which",
    "pydantic": "the CLI's models load after the spawn",
    "anyio": "the event loop, likewise",
    "asyncio": "likewise",
    "click": "the CLI itself, likewise",
    "orchestrate.run": "the run, likewise",
    "orchestrate.normalizers": "likewise",
    "orchestrate.approvals": "likewise",
    "pathlib": "with re, fnmatch, urllib.parse, ipaddress: ~5 ms; the spec's cwd is a str until read",
    "fnmatch": "through pathlib",
    "urllib": "through pathlib",
    "ipaddress": "through pathlib (urllib.parse)",
    # The spawn's own modules (process/prestart.py, containment.py, supervisor.py) are lean too:
    # their types are TYPE_CHECKING's, their `with contextlib.suppress` plain try blocks.
    "typing": "with re, enum, warnings: ~5 ms of the spawn's modules before it",
    "re": "through typing, or shlex",
    "enum": "through re, or signal.py (the spawn's modules use _signal)",
    "contextlib": "with collections, functools, types: ~4 ms",
    "collections": "through contextlib (collections.abc alone, for types, loads it too)",
    "functools": "through contextlib",
    "itertools": "containment counts its cgroups with an int",
    "warnings": "through typing",
    "fcntl": "the early write alone uses it (imported there)",
    "socket": "socket.py's enums: the spawn's socket pair is _socket's",
    "subprocess": "with threading, selectors and signal's enums: the early spawn is os.posix_spawn's",
    "threading": "through subprocess",
}

# Our own modules on the way to the spawn (the package, the early start, the registry, the executor,
# its spec) import none of these: typing and re cost ~3 ms each, pathlib ~5, importlib (with
# warnings) and types under one.  The spawn's own modules (process/prestart.py, containment.py:
# subprocess, socket) are not judged here.
NOT_IN_THE_SPEC = ("typing", "re", "pathlib", "collections", "contextlib", "importlib", "warnings", "types")

# Build the early spec of `orchestrate ARGV...` (no spawn) and print the modules loaded then.
BUILD_SPEC = r"""
import sys
from orchestrate.cli import early
spec = early.early_spec(sys.argv[1:])
assert spec is not None, "no early spec"
print(spec.directory)
print("\n".join(sorted(sys.modules)))
"""


def first_spawn(tmp_path: Path, early: str) -> tuple[list[str], set[str]]:
    """The argv of the run's first spawn, and the modules loaded at that moment.

    The early start is probed without ``site`` (``-S``; PYTHONPATH still finds this checkout): what
    is judged is what our code loads, not what the install's start-up hooks load in every python
    process (setuptools' finder for a flat-layout editable install imports pathlib, re, typing's
    neighbours: .ci/install avoids it).  Nothing before the early spawn needs site-packages (an
    import of one fails the spawn, and this test with it); the CLI after it does, so the run fails
    then, which is not judged.  The late start needs site-packages before its spawn: probed with
    them."""
    out = tmp_path / f"at-spawn-{early}.txt"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ORCHESTRATE_HOME": str(tmp_path / "home"),
        "ORCHESTRATE_BIN_PATH": str(_fake_claude(tmp_path, "exit 0")),
        "ORCHESTRATE_EARLY": early,
        "AT_SPAWN_OUT": str(out),
    }
    proc = subprocess.run(
        [sys.executable, *(["-S"] if early != "0" else []), "-c", AT_SPAWN, *RUN],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert out.exists(), f"nothing spawned: {proc.stderr.decode(errors='replace')[-2000:]}"
    head, _, rest = out.read_text().partition("\n")
    return head.split("\0"), set(rest.split())


def at_send(tmp_path: Path) -> set[str]:
    """The modules loaded when the early start sent its supervisor the agent's command line."""
    sent = tmp_path / "at-spawn-1.txt.send"
    assert sent.exists(), "the early start sent nothing to its supervisor"
    return set(sent.read_text().split())


def loaded(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


def test_the_early_spawn_comes_before_dataclasses_and_the_cli(tmp_path: Path) -> None:
    argv, modules = first_spawn(tmp_path, "1")
    # The first spawn is the agent's supervisor, forked by the early path (one thread: it may)
    # before the executor's code is loaded; the agent's command line goes to it later, over its
    # control socket.
    assert argv == ["(fork)"], argv
    assert "orchestrate.process.prestart" in modules  # the watch fired at the early spawn
    assert "orchestrate.executors.claude_code" not in modules
    found = {name: why for name, why in NOT_BEFORE_THE_SPAWN.items() if loaded(modules, name)}
    assert not found, f"loaded before the supervisor's spawn: {found}"
    sent = at_send(tmp_path)
    assert "orchestrate.executors.claude_code" in sent
    found = {name: why for name, why in NOT_BEFORE_THE_SPAWN.items() if loaded(sent, name)}
    assert not found, f"loaded before the agent's command line was sent: {found}"


def test_the_probe_sees_a_late_spawn(tmp_path: Path) -> None:
    """Without the early start the first spawn comes after the CLI has loaded: the same probe
    finds dataclasses and pydantic then, so it can tell."""
    argv, modules = first_spawn(tmp_path, "0")
    assert any(a.endswith("supervisor.py") for a in argv), argv
    assert loaded(modules, "dataclasses") and loaded(modules, "pydantic") and loaded(modules, "click")
    assert loaded(modules, "pathlib") and loaded(modules, "urllib") and loaded(modules, "typing")


def _fake_claude(tmp_path: Path, script: str = "") -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / "claude").chmod(0o755)
    return bin_dir


def test_the_early_spec_is_built_without_typing_pathlib_or_re(tmp_path: Path) -> None:
    """The package, the early start, the registry, Claude Code's executor and the spec load
    none of NOT_IN_THE_SPEC: a top-level import of one of them (or of a module that does) in any of
    those files fails here, whatever the spawn's own modules load.  The control: the same probe
    once ``pathlib`` and ``typing`` are loaded sees them, so the check can fail."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCHESTRATE_BIN_PATH": str(_fake_claude(tmp_path))}
    args = ["run", "-e", "claude-code", "--approvals", "deny", "--cwd", str(tmp_path), "hi"]

    def probe(prelude: str) -> tuple[str, set[str]]:
        done = subprocess.run(
            [sys.executable, "-S", "-c", prelude + BUILD_SPEC, *args],  # -S: above
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        directory, _, rest = done.stdout.partition("\n")
        return directory, set(rest.split())

    directory, modules = probe("")
    assert directory == os.path.realpath(tmp_path)
    assert "orchestrate.executors.claude_code" in modules and "orchestrate.process.spec" in modules
    found = [name for name in NOT_IN_THE_SPEC if loaded(modules, name)]
    assert not found, f"loaded while building the early spec: {found}"
    _, control = probe("import pathlib, typing\n")
    assert loaded(control, "pathlib") and loaded(control, "typing")


@pytest.mark.parametrize("command", ["/bin/sh", "sh", "./sh", "no-such-program-here", "", "."])
def test_which_matches_shutil(tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """find_program's own ``which`` (no shutil before the spawn) finds what shutil.which finds:
    executables only, not directories nor files without the execute bit, in PATH's order, an
    empty PATH entry meaning the current directory."""
    import shutil

    from orchestrate.executors.base import _which

    first, second, cwd = tmp_path / "a", tmp_path / "b", tmp_path / "cwd"
    for directory in (first, second, cwd):
        directory.mkdir()
    (first / "sh").write_text("not executable")
    (first / "no-such-program-here").mkdir()
    (second / "sh").write_text("#!/bin/sh\n")
    (second / "sh").chmod(0o755)
    (cwd / "sh").write_text("#!/bin/sh\n")
    (cwd / "sh").chmod(0o755)
    monkeypatch.chdir(cwd)
    for path in (f"{first}:{second}", f":{first}", f"{first}::{second}", f"{first}", str(second)):
        # (named absolutely: the agent is spawned in the task's directory, tests/test_attack_which.py)
        expected = shutil.which(command, path=path)
        expected = None if expected is None else os.path.abspath(expected)
        assert _which(command, path) == expected, (command, path)


def test_a_spec_from_a_str_is_the_spec_from_its_path(tmp_path: Path) -> None:
    """The early start's spec (its directory a str, no pathlib) and the run's (a Path) are one
    spec: the run adopts the early agent only when they are equal (run/handle.py).  ``cwd`` reads
    as a Path whichever was given; ``directory`` is the str the spawn passes."""
    from orchestrate.process.spec import ProcessSpec

    link = tmp_path / "link"
    link.symlink_to(tmp_path, target_is_directory=True)
    for given in (str(tmp_path), tmp_path, f"{tmp_path}/", f"{tmp_path}//."):
        spec = ProcessSpec(["a"], given, {"K": "V"})
        assert spec == ProcessSpec(["a"], tmp_path, {"K": "V"}), given
        assert isinstance(spec.cwd, Path) and spec.cwd == tmp_path
        assert isinstance(spec.directory, str)
        assert spec.replace(argv=["a"]) == spec and spec.replace(cwd=str(tmp_path)) == spec
    assert ProcessSpec(["a"], str(link), {}) != ProcessSpec(["a"], tmp_path, {})  # paths, not files
    assert ProcessSpec(["a"], "rel", {}).cwd == Path("rel")
    assert ProcessSpec(["a"], tmp_path, {}) != ProcessSpec(["a"], tmp_path / "x", {})
    expected = f"ProcessSpec(argv=['a'], cwd={tmp_path!r}, env={{}})"
    assert repr(ProcessSpec(["a"], str(tmp_path), {})) == expected
    spec = ProcessSpec(["a"], tmp_path, {})
    for name in ("cwd", "directory"):
        with pytest.raises(AttributeError):
            setattr(spec, name, "/elsewhere")


def test_the_early_spec_names_the_resolved_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--cwd`` through a symlink, relative, or not given: the early start resolves it with
    os.path.realpath where the full path uses Path.resolve (the same function since 3.10), and a
    directory that is not one (missing, a file, a symlink loop) starts nothing early."""
    from orchestrate.cli import early

    monkeypatch.setenv("ORCHESTRATE_BIN_PATH", str(_fake_claude(tmp_path)))
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "file").write_text("")
    monkeypatch.chdir(tmp_path)
    args = ["run", "-e", "claude-code", "--approvals", "deny"]
    for cwd in (["--cwd", str(tmp_path / "link")], ["--cwd", "link"], ["--cwd", "./link/../real"]):
        spec = early.early_spec([*args, *cwd, "hi"])
        assert spec is not None and spec.directory == str(real) and spec.cwd == Path(cwd[1]).resolve()
    monkeypatch.chdir(tmp_path / "link")
    spec = early.early_spec([*args, "hi"])
    assert spec is not None and spec.cwd == Path.cwd().resolve()
    for bad in ("loop", "file", "missing", str(tmp_path / "loop")):
        monkeypatch.chdir(tmp_path)
        assert early.early_spec([*args, "--cwd", bad, "hi"]) is None, bad


def test_the_install_adds_no_import_hook_to_every_start() -> None:
    """.ci/install's editable install is a plain path entry (pyproject.toml's package-dir), not
    setuptools' finder for a flat layout, which every python process of the venv imported at start
    (with pathlib, re, urllib.parse, ipaddress, fnmatch, importlib.util: ~13 ms before `orchestrate
    run` could start its agent).  Fails in a venv installed before that change: run .ci/install's
    pip line again (`pip install -e .`)."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys; print(*sys.modules, sep='\\n')"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    hooks = [m for m in done.stdout.split() if m.startswith("__editable__")]
    assert not hooks, f"an editable install's import hook runs at every python start: {hooks}"


def test_import_module_is_importlibs_for_a_name_in_the_package() -> None:
    """lazy.import_module (importlib.import_module without the importlib package) gives the module
    itself, loaded or not, and refuses what it does not resolve as importlib would."""
    import importlib

    import orchestrate
    from orchestrate.lazy import import_module

    assert import_module(".errors", "orchestrate") is importlib.import_module(".errors", "orchestrate")
    claude = import_module(".executors.claude_code", "orchestrate")
    assert claude.__name__ == "orchestrate.executors.claude_code"
    assert claude is sys.modules["orchestrate.executors.claude_code"]
    assert orchestrate.get_executor("claude-code").name == "claude-code"  # through the registry's import
    with pytest.raises(ModuleNotFoundError):
        import_module(".no_such_module", "orchestrate")
    for name in ("errors", "..errors", "orchestrate.errors"):
        with pytest.raises(ValueError, match="relative"):
            import_module(name, "orchestrate")
