"""An adversarial review of the command's code cache (cli/code_cache.py): what broke, each held by
a test that failed before its fix.

- A code compiled at one optimization level was handed to an interpreter at another (``-O``,
  ``-OO``, ``PYTHONOPTIMIZE``): ``__debug__`` in a string annotation read True under ``-O``.  The
  import system keeps one ``.pyc`` per level (``.opt-1.pyc``); so does the cache now.
- The temporary file was opened by a predictable name (``{path}.{pid}.tmp``) without ``O_EXCL``: a
  symlink planted there had its target overwritten, and two writers of the same pid (containers
  sharing a volume, each its own pid 1) wrote into one file, spliced.  Now a name of its own, made
  exclusively, never through a link; and with the mode of the package's source, as a ``.pyc`` is
  (it was 0o666 less the umask: world-writable under ``umask 0``, beside ``.pyc`` files that are not).
- An interrupt (Ctrl-C at exit) while writing left the temporary file behind for good.
- ``early.begin``, which tests call in their own process, installed the stand-ins there: the rest of
  the session ran through them, and the test process wrote its classes' texts into the checkout's
  cache at its exit.  Only the command (``early.main``) installs them now.
- A long-lived process (``serve``) kept every text it compiled, and its code, for its whole life:
  the texts kept for the file are bounded as the file is.
- Texts no start used any more (an upgrade's leftovers) were kept up to MAX_CODES, read at every
  start: now only while they are fewer than those used.
- ``exec`` of a string with ``closure=`` is refused by the builtin; the stand-in compiled the string
  first and let the builtin say something else.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from orchestrate.cli import code_cache

from .helpers import FAKE_CODEX
from .test_code_cache import run_python

DEBUG = r"""
import json, sys
sys.pycache_prefix = sys.argv[1]
from orchestrate.cli import code_cache
code_cache.install()
import typing
ref = typing.ForwardRef("__debug__")
got = [eval(ref.__forward_code__), sys.flags.optimize, code_cache.stats(), code_cache.cache_path()]
print(json.dumps(got))
"""


def test_a_code_is_not_shared_between_optimization_levels(tmp_path: Path) -> None:
    """``__debug__`` is folded by the compiler (True at level 0, False under -O): a code compiled
    by a plain start and handed to ``python -O`` said True there."""
    prefix = str(tmp_path / "prefix")
    seen = {}
    levels: list[tuple[tuple[str, ...], dict[str, str]]] = [((), {}), (("-O",), {}), (("-OO",), {})]
    for flags, env in [*levels, ((), {"PYTHONOPTIMIZE": "1"}), ((), {})]:
        for _ in range(2):  # cold, then warm
            debug, level, stats, path = json.loads(run_python(DEBUG, prefix, flags=flags, env=env))
            assert debug is (level == 0), (flags, env, stats)
        assert stats == {"hits": 1, "misses": 0}, (flags, env)  # the warm start found it, at its level
        seen[level] = path
    assert len(set(seen.values())) == 3  # one file per level, as .pyc files are
    assert seen[0].endswith(f"code_cache.{sys.implementation.cache_tag}.codes")
    assert seen[1].endswith(f"code_cache.{sys.implementation.cache_tag}.opt-1.codes")


def test_a_link_planted_at_the_temporary_name_is_not_followed(
    tmp_path: Path, fresh_code_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever may write the folder may replace the cache (the .pyc files too): that is the trust
    the file has.  Overwriting some other file of the user's through a link is more than that."""
    path = tmp_path / "cache" / "codes"
    path.parent.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"the user's own file")
    planted = Path(f"{path}.{os.getpid()}.tmp")  # (the name it had: the attacker's guess)
    planted.symlink_to(victim)
    monkeypatch.setattr(code_cache, "_temporary", lambda _: str(planted), raising=False)
    code_cache._code("x = 1", "exec")
    code_cache._save(str(path))
    assert victim.read_bytes() == b"the user's own file"
    assert planted.is_symlink()  # not ours: left as it was
    assert not path.exists()  # nothing written this time; the next start tries again


def test_two_writers_never_share_a_temporary_file(tmp_path: Path, fresh_code_cache: None) -> None:
    """Two processes of the same pid (two containers, each its own pid 1, sharing a volume) wrote
    through one temporary name, each truncating the other's: the file renamed in could be a
    splice of two.  Each write now goes to a name of its own, created exclusively."""
    path = tmp_path / "codes"
    stale = Path(f"{path}.{os.getpid()}.tmp")
    stale.write_bytes(b"the other writer's half")
    code_cache._code("x = 1", "exec")
    code_cache._save(str(path))
    assert stale.read_bytes() == b"the other writer's half"
    assert ("exec", "x = 1") in code_cache._read(str(path))


def test_the_file_has_the_mode_a_pyc_would_have(tmp_path: Path) -> None:
    """As the import system writes a .pyc: the source's mode (plus the owner's write), less the
    umask.  Under ``umask 0`` it was 0o666, writable by anyone, beside .pyc files that are not."""
    prefix = str(tmp_path / "prefix")
    script = (
        "import os, sys\n"
        "os.umask(0)\n"
        "sys.pycache_prefix = sys.argv[1]\n"
        "from orchestrate.cli import code_cache\n"
        "code_cache.install()\n"
        "from dataclasses import dataclass\n"
        "@dataclass\n"
        "class Made:\n"
        "    made_here: int\n"
        "print(code_cache.cache_path())\n"
    )
    path = Path(run_python(script, prefix).strip())
    source_mode = stat.S_IMODE(Path(code_cache.__file__).stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == (source_mode | 0o200) & 0o666


@pytest.mark.parametrize("failure", [KeyboardInterrupt(), OSError(errno.ENOSPC, "No space left on device")])
def test_a_write_that_fails_leaves_no_temporary_file(
    tmp_path: Path, fresh_code_cache: None, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    """A full disk is taken quietly (the next start compiles); Ctrl-C at exit goes on as an
    interrupt: neither leaves the temporary file (an interrupt did, for good)."""
    path = tmp_path / "codes"

    class Failing:
        @staticmethod
        def dumps(_: object) -> bytes:
            raise failure

    code_cache._code("x = 1", "exec")
    monkeypatch.setattr(code_cache, "marshal", Failing)
    if isinstance(failure, OSError):
        code_cache._save(str(path))
    else:
        with pytest.raises(KeyboardInterrupt):
            code_cache._save(str(path))
    assert list(tmp_path.iterdir()) == []
    assert code_cache._new  # still to be written


def test_a_long_life_keeps_at_most_the_bound_of_new_texts(
    fresh_code_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve`` lives for days: a text compiled once (a class or annotation made at run time, from
    data) was kept, with its code, until the process ended, whatever their number."""
    monkeypatch.setattr(code_cache, "MAX_CODES", 10)
    for i in range(50):
        assert eval(code_cache._code(f"{i} + 0", "eval")) == i
    assert len(code_cache._new) <= 10
    assert code_cache.stats() == {"hits": 0, "misses": 50}


def test_exec_of_a_string_with_a_closure_is_refused_as_the_builtin_refuses_it() -> None:
    with pytest.raises(TypeError) as builtin:
        exec("x = 1", {}, None, closure=())
    with pytest.raises(TypeError) as stand_in:
        code_cache._exec("x = 1", {}, None, closure=())
    assert str(stand_in.value) == str(builtin.value)


def early_codex_run(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """The arguments and environment of an `orchestrate run` that starts the fake app-server early."""
    (tmp_path / "work").mkdir()
    args = ["run", "-e", "codex", "--cwd", str(tmp_path / "work"), "--approvals", "deny"]
    args += ["--base-command", f"{sys.executable} {FAKE_CODEX}", "hello"]
    return args, {"ORCHESTRATE_HOME": str(tmp_path / "home"), "ORCHESTRATE_STORE": "off"}


def test_an_early_start_alone_does_not_install_the_stand_ins(tmp_path: Path) -> None:
    """Tests call ``early.begin`` in their own process: only the command (``early.main``) takes
    over dataclasses' exec and typing's compile (and writes the file at its exit)."""
    script = (
        "import json, sys, dataclasses, typing\n"
        "from orchestrate.cli import early\n"
        "started = early.begin(sys.argv[1:])\n"
        "early.discard()\n"
        "print(json.dumps([started is not None, 'exec' in vars(dataclasses), 'compile' in vars(typing)]))\n"
    )
    args, env = early_codex_run(tmp_path)
    got = json.loads(run_python(script, *args, env=env))
    assert got == [True, False, False]


def test_the_command_installs_them_before_its_first_write(tmp_path: Path) -> None:
    """``early.main`` (the command, its click command replaced) has them in place before the
    handshake is built (run/early_opening.py's classes go through them), and for any command."""
    script = (
        "import json, sys, dataclasses\n"
        "from orchestrate.cli import early, main\n"
        "seen = []\n"
        "write_first = early._write_first\n"
        "def watched(*args):\n"
        "    seen.append('exec' in vars(dataclasses))\n"
        "    write_first(*args)\n"
        "early._write_first = watched\n"
        "main.main = lambda: seen.append('exec' in vars(dataclasses))\n"
        "sys.argv = ['orchestrate', *sys.argv[1:]]\n"
        "early.main()\n"
        "print(json.dumps(seen))\n"
    )
    args, env = early_codex_run(tmp_path)
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "prefix")
    assert json.loads(run_python(script, *args, env=env)) == [True, True]  # the early write, the CLI
    assert json.loads(run_python(script, "--version", env=env)) == [True]  # no early start: the CLI


def test_texts_nobody_uses_any_more_never_outweigh_those_used(tmp_path: Path, fresh_code_cache: None) -> None:
    """Each upgrade of pydantic (or of us) leaves texts no start asks for again: read at every
    start and never used, they piled up to MAX_CODES (8192, ~9x the command's own ~900), where
    reading them all cost about what compiling the used ones did (a tenth each).  A write keeps
    the unused ones only while they are fewer than those used."""
    path = tmp_path / "codes"
    code_cache._codes.update(
        {("exec", f"x = {i}"): compile(f"x = {i}", "<string>", "exec") for i in range(50)}
    )
    for i in range(5):
        code_cache._code(f"x = {i}", "exec")
    code_cache._code("x = 'new'", "exec")
    code_cache._save(str(path))
    assert set(code_cache._read(str(path))) == {("exec", f"x = {i}") for i in [0, 1, 2, 3, 4, "'new'"]}

    code_cache._codes.update(
        {("exec", f"x = {i}"): compile(f"x = {i}", "<string>", "exec") for i in range(50)}
    )
    for i in range(30):  # most used: the few others stay (another command's, maybe)
        code_cache._code(f"x = {i}", "exec")
    code_cache._code("x = 'newer'", "exec")
    code_cache._save(str(path))
    assert len(code_cache._read(str(path))) == 51
