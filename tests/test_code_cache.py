"""The command's cache of the code dataclasses and typing compile at every start (cli/code_cache.py).

What it promises, each tried in fresh interpreters (the cache stands in for ``exec`` in dataclasses
and ``compile`` in typing: never inside the test process): the classes and annotations made with it
are the ones made without it, from a cold cache and a warm one; a second start compiles nothing the
first did; a missing, damaged, truncated, foreign or wrongly typed file is ignored and replaced; an
interpreter told not to write bytecode writes none, a place it cannot write to gets none and keeps
no temporary file; starts racing to write leave one whole file; a forked child does not write; the file
stays within its bound.  And the real ``orchestrate run`` uses it: its second start finds every text.
"""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrate.cli import code_cache

from .helpers import FAKE_CODEX, ROOT

# Dataclasses of every shape the generated methods take, string annotations, and a fingerprint of
# everything generated: each method's code (bytes, constants, names, signature), annotations,
# defaults, and what instances do.  Printed as JSON, with the cache's counts.
FINGERPRINT = r"""
import json, sys
sys.pycache_prefix = sys.argv[1]
from orchestrate.cli import code_cache
if sys.argv[2] == "on":
    code_cache.install()
import dataclasses, typing
from dataclasses import InitVar, dataclass, field
from typing import ClassVar, Generic, TypeVar

T = TypeVar("T")

@dataclass
class Plain:
    a: int
    b: "str" = "x"
    c: list[int] = field(default_factory=list)
    k: ClassVar[int] = 3

@dataclass(frozen=True, slots=True, order=True)
class Frozen:
    a: int
    b: "typing.Optional[str]" = None

@dataclass(kw_only=True, eq=False, repr=False)
class KwOnly:
    a: int
    b: int = field(default=2, init=False)
    seed: InitVar[int] = 0
    def __post_init__(self, seed: int) -> None:
        self.b = self.a + seed

@dataclass(unsafe_hash=True)
class Boxed(Generic[T]):
    item: "T"
    items: "tuple[T, ...]" = ()

def of_code(c):  # (a nested code object's repr has its address: compared by its parts instead)
    consts = [of_code(k) if hasattr(k, "co_code") else repr(k) for k in c.co_consts]
    return [c.co_code.hex(), consts, list(c.co_names), list(c.co_varnames), c.co_flags, c.co_filename,
            c.co_firstlineno, c.co_argcount, c.co_kwonlyargcount, c.co_linetable.hex()]

def code(f):
    return [of_code(f.__code__), repr(f.__defaults__), repr(f.__kwdefaults__), f.__qualname__,
            {k: repr(v) for k, v in f.__annotations__.items()}]

out = {}
for cls in (Plain, Frozen, KwOnly, Boxed):
    out[cls.__name__] = {
        name: code(getattr(cls, name)) for name in sorted(vars(cls))
        if callable(getattr(cls, name)) and hasattr(getattr(cls, name), "__code__")
    }
behaviour = [repr(Plain(1)), Plain(1) == Plain(1, "x"), repr(Frozen(1, "y")), Frozen(1) < Frozen(2),
             hash(Frozen(1)) == hash(Frozen(1)), KwOnly(a=1, seed=5).b, hash(Boxed(1)) == hash(Boxed(1))]
try:
    Frozen(1).a = 2
except dataclasses.FrozenInstanceError as exc:
    behaviour.append(type(exc).__name__)
out["behaviour"] = behaviour
ref = typing.ForwardRef("dict[str, list[int]] | None")
out["forward"] = of_code(ref.__forward_code__)
out["hints"] = {k: repr(v) for k, v in typing.get_type_hints(Frozen).items()}
out["stats"] = code_cache.stats()
print(json.dumps(out))
"""


def run_python(
    script: str, *args: str, flags: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> str:
    """``python FLAGS -c SCRIPT ARGS`` with this checkout first on the path and bytecode written
    (unless ``env`` says otherwise); it must succeed.  Its stdout."""
    done = subprocess.run(
        [sys.executable, *flags, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "", **(env or {})},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def fingerprint(prefix: Path, mode: str, **env: str) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(run_python(FINGERPRINT, str(prefix), mode, env=env).splitlines()[-1])
    return got


def cache_file(prefix: Path) -> Path:
    """Where a start with ``sys.pycache_prefix = prefix`` keeps the cache."""
    return Path(str(prefix) + str(Path(code_cache.__file__).parent)) / (
        f"code_cache.{sys.implementation.cache_tag}.codes"
    )


def without_stats(got: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in got.items() if k != "stats"}


def read_codes(path: Path) -> dict[Any, Any]:
    data = path.read_bytes()
    header = code_cache._header()
    assert data.startswith(header)
    codes: dict[Any, Any] = marshal.loads(data[len(header) :])
    return codes


@pytest.fixture
def plain(tmp_path: Path) -> dict[str, Any]:
    """The fingerprint of an interpreter without the cache."""
    got = fingerprint(tmp_path / "plain", "off")
    assert got["stats"] == {"hits": 0, "misses": 0}
    assert not cache_file(tmp_path / "plain").exists()
    return got


def test_cold_and_warm_starts_make_the_same_code_as_none(tmp_path: Path, plain: dict[str, Any]) -> None:
    prefix = tmp_path / "prefix"
    cold = fingerprint(prefix, "on", PYTHONDONTWRITEBYTECODE="")
    assert cold["stats"]["misses"] >= 18, cold["stats"]  # it compiled, and was asked
    assert cache_file(prefix).exists()
    warm = fingerprint(prefix, "on", PYTHONDONTWRITEBYTECODE="")
    assert warm["stats"]["misses"] == 0, warm["stats"]
    assert warm["stats"]["hits"] >= cold["stats"]["misses"]
    assert without_stats(cold) == without_stats(plain)
    assert without_stats(warm) == without_stats(plain)


@pytest.mark.parametrize(
    "damage",
    ["empty", "truncated", "garbage", "other magic", "a list", "bad keys", "not code", "a directory"],
)
def test_a_damaged_file_is_ignored_and_replaced(tmp_path: Path, plain: dict[str, Any], damage: str) -> None:
    prefix = tmp_path / "prefix"
    fingerprint(prefix, "on", PYTHONDONTWRITEBYTECODE="")
    path = cache_file(prefix)
    whole = path.read_bytes()
    header = code_cache._header()
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(whole[: len(whole) // 2])
    elif damage == "garbage":
        path.write_bytes(header + b"\xff\x00garbage" * 100)
    elif damage == "other magic":
        path.write_bytes(b"\x00\x00\r\n" + whole[4:])
    elif damage == "a list":
        path.write_bytes(header + marshal.dumps([1, 2, 3]))
    elif damage == "bad keys":
        codes = read_codes(path)
        path.write_bytes(header + marshal.dumps({("run", k[1]): v for k, v in codes.items()} | {1: 2}))
    elif damage == "not code":
        path.write_bytes(header + marshal.dumps(dict.fromkeys(read_codes(path), "import os")))
    else:
        path.unlink()
        path.mkdir()
    got = fingerprint(prefix, "on", PYTHONDONTWRITEBYTECODE="")
    assert without_stats(got) == without_stats(plain)
    assert got["stats"]["misses"] >= 18  # nothing usable was read: everything compiled again
    if damage == "a directory":
        assert path.is_dir() and not list(path.parent.glob("*.tmp"))
        return
    assert fingerprint(prefix, "on", PYTHONDONTWRITEBYTECODE="")["stats"]["misses"] == 0  # replaced whole


def test_no_file_when_bytecode_is_not_written(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    got = fingerprint(prefix, "on", PYTHONDONTWRITEBYTECODE="1")
    assert got["stats"]["misses"] >= 18
    assert not cache_file(prefix).exists()


def test_a_place_that_cannot_be_made_is_left_alone(tmp_path: Path) -> None:
    """A failed write leaves nothing behind, as root too: a plain file stands where the cache's
    folder would be made."""
    prefix = tmp_path / "prefix"
    folder = cache_file(prefix).parent
    folder.parent.mkdir(parents=True)
    folder.write_bytes(b"not a folder")
    got = fingerprint(prefix, "on", PYTHONDONTWRITEBYTECODE="")
    assert got["stats"]["misses"] >= 18
    assert folder.read_bytes() == b"not a folder"
    assert not [p for p in prefix.rglob("*") if p.suffix in (".tmp", ".codes")]


def test_starts_racing_to_write_leave_one_whole_file(tmp_path: Path, plain: dict[str, Any]) -> None:
    prefix = tmp_path / "prefix"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": ""}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FINGERPRINT, str(prefix), "on"], env=env, stdout=subprocess.DEVNULL
        )
        for _ in range(8)
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    assert not list(cache_file(prefix).parent.glob("*.tmp"))
    warm = fingerprint(prefix, "on", PYTHONDONTWRITEBYTECODE="")
    assert warm["stats"]["misses"] == 0
    assert without_stats(warm) == without_stats(plain)


def test_a_forked_child_does_not_write(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    script = (
        "import os, sys\n"
        f"sys.pycache_prefix = {str(prefix)!r}\n"
        "from orchestrate.cli import code_cache\n"
        "code_cache.install()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    from dataclasses import dataclass\n"
        "    @dataclass\n"
        "    class OnlyInTheChild:\n"
        "        only_in_the_child: int\n"
        "    sys.exit(0)\n"
        "os.waitpid(pid, 0)\n"
        f"assert not os.path.exists({str(cache_file(prefix))!r}), 'the child wrote'\n"
    )
    run_python(script)
    # The parent compiled nothing new itself (install() made no dataclass): no file at all.
    assert not cache_file(prefix).exists()


@pytest.mark.usefixtures("fresh_code_cache")
def test_the_file_keeps_at_most_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More texts than MAX_CODES: what this process used or compiled is kept first, and never more
    than the bound.  (The module's state is driven directly: install() is not called in here.)"""
    path = tmp_path / "codes"
    monkeypatch.setattr(code_cache, "MAX_CODES", 10)
    for i in range(8):
        code_cache._code(f"x = {i}", "exec")
    code_cache._save(str(path))
    assert len(read_codes(path)) == 8
    code_cache._codes.update(code_cache._read(str(path)))
    code_cache._code("x = 0", "exec")  # used by this process
    for i in range(100, 105):
        code_cache._code(f"x = {i}", "exec")
    code_cache._save(str(path))
    kept = read_codes(path)
    assert len(kept) <= 10
    assert ("exec", "x = 0") in kept and all(("exec", f"x = {i}") in kept for i in range(100, 105))
    assert ("exec", "x = 7") not in kept  # read, never used: the first to go


def test_exec_without_namespaces_takes_the_callers_as_the_builtin_does() -> None:
    def with_stand_in() -> Any:
        before = 41
        here: dict[str, Any] = {"before": before}
        code_cache._exec("after = before + 1", None, here)
        return here["after"]

    assert with_stand_in() == 42
    ns: dict[str, Any] = {}
    code_cache._exec("z = 1", ns)
    assert ns["z"] == 1


def test_compile_passes_anything_else_to_the_builtin() -> None:
    assert code_cache._compile(b"1 + 1", "<string>", "eval").co_filename == "<string>"
    assert code_cache._compile("1 + 1", "file.py", "eval").co_filename == "file.py"
    import ast

    tree = ast.parse("1 + 1", mode="eval")
    assert eval(code_cache._compile(tree, "<string>", "eval")) == 2
    assert code_cache._compile("x = 1", "<string>", "exec", ast.PyCF_ONLY_AST).__class__ is ast.Module
    with pytest.raises(SyntaxError):
        code_cache._compile("1 +", "<string>", "eval")


def test_a_second_run_compiles_nothing_the_first_did(tmp_path: Path) -> None:
    """The real command: `orchestrate run` against the fake app-server writes the cache at its exit;
    a second run finds every text (it would write the file again for anything new)."""
    prefix = tmp_path / "prefix"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONPYCACHEPREFIX": str(prefix),
        "PYTHONDONTWRITEBYTECODE": "",
        "ORCHESTRATE_STORE": "off",
        "ORCHESTRATE_HOME": str(tmp_path / "home"),
    }
    command = [sys.executable, "-m", "orchestrate", "run", "-e", "codex", "--output", "jsonl"]
    command += ["--approvals", "deny", "--base-command", f"{sys.executable} {FAKE_CODEX}", "plain hello"]
    outputs = []
    for _ in range(2):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout)
        path = cache_file(prefix)
        assert path.exists()
        if len(outputs) == 1:
            first = path.stat().st_mtime_ns
            kept = read_codes(path)
            assert sum(1 for mode, _ in kept if mode == "exec") > 100  # ~420: every dataclass method
            assert sum(1 for mode, _ in kept if mode == "eval") > 100  # ~400: pydantic's annotations
    assert path.stat().st_mtime_ns == first, "the second run compiled something the first had kept"
    assert all('"outcome":"success"' in out.splitlines()[-1] for out in outputs)
