"""The opt-in build compiled with mypyc (setup.py, ``ORCHESTRATE_MYPYC=1``): it builds, it gives the
very same patches as the pure modules, and it never lands in the source tree.

The build test builds a copy of the package as a wheel would hold it (mypyc type-checks the
package, gcc compiles it: about 70 s of CPU), then runs the pinned patch streams of every fixture
(tests/test_patch_stream.py, with their fuzzed variants) and the fuzz test against the compiled
modules in a pytest of their own (about 25 s), and the benchmark's --decompose on them.  It needs a
C compiler and Python's headers (.ci/install provides them): without them it skips, or fails where
ORCHESTRATE_REQUIRE_REAL_CLIS=1.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from .services import unavailable

ROOT = Path(__file__).resolve().parent.parent
_EXTENSION = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
# What the compiled copy runs: every patch stream pinned, and the fuzz test (whose brittle
# normalizers subclass a compiled one in Python: normalizers/compiled.py).
_PINS = ["tests/test_patch_stream.py", "tests/test_fuzz.py"]
BENCH = ROOT / "bench" / "normalizer_throughput.py"


def _python(*args: str, cwd: Path = ROOT, **env: str | None) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``cwd`` with ``env`` changed (None: unset), bounded."""
    environ = {**os.environ, **env}
    environ = {k: v for k, v in environ.items() if v is not None}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=600
    )


# setup.py run as a module, its setup() told only to print the name.
_SETUP = "import runpy, sys; sys.argv = ['setup.py', '--name']; g = runpy.run_path('setup.py'); "


def _compiled_modules() -> list[str]:
    """setup.py's list, as module paths without ``.py``."""
    out = _python("-c", _SETUP + "print(*g['COMPILED'], sep='\\n')", ORCHESTRATE_MYPYC=None).stdout
    return [line.removesuffix(".py") for line in out.splitlines() if line.endswith(".py")]


def test_no_compiled_module_in_the_checkout() -> None:
    # A .so beside a .py is imported in its place: one left in the source tree (a `mypyc` run or an
    # in-place build) would silently shadow every later edit of that module.
    stale = sorted(
        str(p.relative_to(ROOT)) for p in [*ROOT.glob("orchestrate/**/*.so"), *ROOT.glob("*__mypyc*")]
    )
    assert stale == [], f"compiled modules in the checkout would shadow their sources: delete {stale}"


@pytest.mark.parametrize("command", [["editable_wheel"], ["build_ext", "--inplace"]])
def test_an_in_place_build_is_refused(command: list[str]) -> None:
    # editable_wheel is what `pip install -e .` runs
    done = _python("setup.py", *command, ORCHESTRATE_MYPYC="1")
    assert done.returncode != 0
    assert "never into the source tree" in done.stderr
    assert not list(ROOT.glob("orchestrate/**/*.so"))


@pytest.mark.parametrize("flag", [None, "1"])
def test_the_default_build_and_the_metadata_compile_nothing(flag: str | None) -> None:
    # Without ORCHESTRATE_MYPYC=1, setup.py adds nothing to pyproject.toml: no extension module.
    # With it, a command that only writes metadata (pip's egg_info, dist_info) compiles nothing.
    done = _python("-c", _SETUP + "print(g['_ext_modules']())", ORCHESTRATE_MYPYC=flag)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


@pytest.mark.timeout(900)
def test_the_compiled_build_gives_the_same_patches(tmp_path: Path) -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        unavailable("no C compiler to build the compiled normalizers with")
    if not (Path(sysconfig.get_path("include")) / "Python.h").exists():
        unavailable("no Python headers (python3-dev) to build the compiled normalizers with")
    modules = _compiled_modules()
    assert "orchestrate/normalizers/base" in modules and "orchestrate/wire/lines" in modules

    # Built from a copy of the package (the build never writes into the checkout) into ``site``:
    # what a wheel holds (setuptools' build, which bdist_wheel zips).
    src, site = tmp_path / "src", tmp_path / "site"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "orchestrate", src / "orchestrate", ignore=shutil.ignore_patterns("__pycache__"))
    build = _python(
        "setup.py",
        "-q",
        "build",
        "--build-lib",
        str(site),
        "--build-temp",
        str(tmp_path / "temp"),
        cwd=src,
        ORCHESTRATE_MYPYC="1",
        ORCHESTRATE_MYPYC_OPT="1",
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    names = {str(p.relative_to(site)) for p in site.rglob("*")}
    # Each compiled module ships twice: compiled, and its source beside it (the fallback, and what
    # a traceback shows).
    for module in modules:
        assert f"{module}.py" in names
        assert f"{module}{_EXTENSION}" in names, f"{module} was not compiled"
    assert "orchestrate/py.typed" in names and "orchestrate/cli/__init__.py" in names

    # The pinned patch streams against the compiled copy: the tests (copied: pytest puts the folder
    # above a test package first on the path) and fixtures of the checkout, the package from the
    # wheel, checked to be the compiled one before the run and by a conftest.py in it.
    shutil.copytree(ROOT / "tests", site / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "fixtures").symlink_to(ROOT / "fixtures")
    shutil.copy(ROOT / "pyproject.toml", site / "pyproject.toml")
    (site / "conftest.py").write_text(
        "import orchestrate.normalizers.base as b, orchestrate.wire.lines as w\n"
        f"assert b.__file__.endswith({_EXTENSION!r}) and w.__file__.endswith({_EXTENSION!r}), (b, w)\n"
    )
    check = "import orchestrate.normalizers.base as b, orchestrate.wire.lines as w; "
    where = _python("-c", check + "print(b.__file__, w.__file__)", cwd=site, PYTHONPATH=str(site))
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [
        str(site / f"orchestrate/normalizers/base{_EXTENSION}"),
        str(site / f"orchestrate/wire/lines{_EXTENSION}"),
    ]
    run = _python(
        "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *_PINS, cwd=site, PYTHONPATH=str(site)
    )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout and " skipped" not in run.stdout

    # The benchmark measures it, its --decompose stages included (subclasses of compiled classes).
    args = ["--mb", "0.02", "--repeat", "1", "--answers", "", "--decompose", "--protocol", "codex-exec"]
    bench = _python(str(BENCH), *args, "--require-compiled", cwd=site, PYTHONPATH=str(site))
    assert bench.returncode == 0, bench.stderr[-3000:]
    assert "normalizers: compiled with mypyc: orchestrate.normalizers.base" in bench.stdout
    assert re.search(r"codex-exec +decomposed .*wire .*1 entry .*full", bench.stdout), bench.stdout


def test_the_benchmark_says_when_the_normalizers_are_pure() -> None:
    args = ["--mb", "0.01", "--repeat", "1", "--answers", "", "--protocol", "acp-qwen"]
    plain = _python(str(BENCH), *args, PYTHONPATH=str(ROOT))
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.stdout.startswith("normalizers: pure Python\n")
    refused = _python(str(BENCH), *args, "--require-compiled", PYTHONPATH=str(ROOT))
    assert refused.returncode == 2
    assert "pure Python: build them with setup.py" in refused.stderr
