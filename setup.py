"""An opt-in build of the normalizers' hot path compiled with mypyc; the default install is unchanged.

    ORCHESTRATE_MYPYC=1 pip install --no-build-isolation .     (mypy, which ships mypyc, and a C
                                                                  compiler must be there)

compiles the wire's framing and line parser and every normalizer module (about 1.3-1.7x faster on
real captures: bench/README.md, "Compiled with mypyc").  Without ORCHESTRATE_MYPYC=1 this file
does nothing that pyproject.toml does not already say: the pure Python modules are what is
installed.  With it, the wheel holds both: a compiled module is imported in place of its source
(an extension module comes first in the import order), and the source stays beside it.

Compiled modules go into a wheel only, never into the source tree: an editable install or an
in-place build is refused, since a stale ``.so`` next to an edited ``.py`` would be
imported instead of it, silently (tests/test_mypyc.py also fails on a compiled module left in the
checkout).  To build from a checkout, build a wheel (``pip wheel``, ``pip install .``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent

COMPILED = [
    "orchestrate/wire/__init__.py",
    "orchestrate/wire/framing.py",
    "orchestrate/wire/lines.py",
    # (not wire/notes.py: its dataclasses' ClassVar kinds are taken for fields by mypyc, and a note
    # comes once per client decision, not per line)
    *sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "orchestrate" / "normalizers").glob("*.py")
        # (compiled.py holds the no-op decorator the pure modules need: it must stay Python)
        if p.name != "compiled.py"
    ),
]
"""The modules compiled (paths from this folder).  Not entries.py: its classes are pydantic
models, which mypyc leaves as Python classes."""

_IN_PLACE = {"develop", "editable_wheel", "--inplace", "-i"}
"""The setuptools commands and options that build extension modules into the source tree."""
_BUILDS = {"build", "build_ext", "bdist_wheel", "bdist", "bdist_egg", "install", *_IN_PLACE}
"""The commands that build them: the others (pip's egg_info and dist_info for the metadata, sdist)
need no compiled module, and would run mypy and write C for nothing."""


def _ext_modules() -> list[object]:
    if os.environ.get("ORCHESTRATE_MYPYC") != "1" or not _BUILDS.intersection(sys.argv):
        return []
    if _IN_PLACE.intersection(sys.argv):
        raise SystemExit(
            "ORCHESTRATE_MYPYC=1 builds the compiled modules into a wheel, never into the source "
            "tree (a stale .so beside an edited .py would be imported in its place): use "
            "`pip install --no-build-isolation .` or `pip wheel`, not `pip install -e .` or "
            "`build_ext --inplace`"
        )
    try:
        from mypyc.build import mypycify
    except ImportError:
        raise SystemExit(
            "ORCHESTRATE_MYPYC=1 needs mypy (which ships mypyc) where the wheel is built: "
            "`pip install mypy`, then `pip install --no-build-isolation .`"
        ) from None

    # (mypyc type-checks the whole package with mypy: the paths are relative to this folder)
    os.chdir(ROOT)
    return list(mypycify(COMPILED, opt_level=os.environ.get("ORCHESTRATE_MYPYC_OPT", "3")))


setup(ext_modules=_ext_modules())
