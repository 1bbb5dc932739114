"""mypyc's class options, for the opt-in compiled build (setup.py, ``ORCHESTRATE_MYPYC=1``).

Compiled, ``@mypyc_attr(allow_interpreted_subclasses=True)`` lets a Python class subclass a
normalizer (a test's brittle handler, a benchmark's stage): mypyc reads the decorator when it
compiles, so the compiled modules never call it.  Not compiled, it is a no-op, and mypy_extensions
(which mypy ships) is needed only by mypy.  This module itself is never compiled (setup.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["mypyc_attr"]

T = TypeVar("T")

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:

    def mypyc_attr(*attrs: str, **options: Any) -> Callable[[T], T]:
        def keep(cls: T) -> T:
            return cls

        return keep
