"""Names a package exports, imported from their modules only when first asked for (PEP 562).

Importing one module of a package runs the package's ``__init__``; one that imported every
exported name would load the whole package (the entry models, the parsers, rich ...) before the
agent is spawned.  The three packages that export many names (the top package, ``approvals`` and
``run``) make their ``__getattr__`` and ``__dir__`` here, from a table of where each name lives.
"""

from __future__ import annotations

import sys

# Types only (mypy takes any ``TYPE_CHECKING`` as true): the package's ``__init__`` runs before
# ``orchestrate run`` starts its agent, and typing (with re) costs ~3 ms there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, MutableMapping
    from types import ModuleType
    from typing import Any

__all__ = ["import_module", "lazy_exports"]


def import_module(name: str, package: str) -> ModuleType:
    """``importlib.import_module(name, package)`` for a ``name`` relative to ``package`` (one leading
    dot), without the ``importlib`` package (which imports warnings) on the way to the early spawn."""
    if not name.startswith(".") or name.startswith(".."):
        raise ValueError(f"not a name relative to {package!r} itself: {name!r}")
    full = package + name
    __import__(full)
    return sys.modules[full]


def lazy_exports(
    package: str, where: Mapping[str, str], namespace: MutableMapping[str, Any], exported: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``where`` maps a name to the module
    (relative to ``package``) that defines it; ``namespace`` is the package's ``globals()``."""
    names = frozenset(exported)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        namespace[name] = value  # found directly from now on
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
