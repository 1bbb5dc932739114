"""What ``orchestrate warm`` loads, and vouches for: everything a run needs, found on disk.

The server (cli/warm_server.py) calls :func:`preload` once; a run tells the server at its end what it
still had to import, and the server loads those it can vouch for (:func:`learnable`,
:func:`vouchable`, :func:`load_quietly`) for the next runs; :func:`fingerprint` says whether any
source file of the package changed since (an upgrade, an edit: the server then stops serving).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

from ..process.prestart import vouch
from .early import AT_START
from .warm import package_dir

__all__ = ["MAX_LEARNED", "fingerprint", "learnable", "load_quietly", "preload", "vouchable"]


MAX_LEARNED = 1 << 16  # bytes of module names a run reports (a pipe's buffer: never blocks)


_VOUCHED_TOPS: set[str] = set()  # the distributions of the modules the preload loaded


# Loaded lazily by runs (the event loop's backend, the store's SQLite dialect and migrations): loaded
# here too, so that the first runs find them (later ones would: see WarmServer._learn).
_LAZY = (
    "anyio._backends._asyncio",
    "anyio.to_thread",
    "anyio.streams.tls",
    "anyio.streams.stapled",
    "anyio.abc._testing",
    "queue",
    "sqlite3",
    "sqlalchemy.dialects.sqlite.pysqlite",
    "sqlalchemy.dialects.sqlite.aiosqlite",
    "alembic.command",  # a new store's (or an upgraded one's) migrations
    "alembic.config",
)


# Never loaded ahead: the command itself (`python -m orchestrate`: importing it runs the CLI), scripts, and
# what `orchestrate run` does not use (the server, the Temporal workers, the test kit), which would
# only make every fork's page tables larger.
_SKIPPED = (
    "orchestrate.__main__",
    "orchestrate.store.migrations",  # Alembic's scripts, run by Alembic
    "orchestrate.serve",
    "orchestrate.engine.temporal",
    "orchestrate.testing",
    "orchestrate.contract",
)


def preload() -> list[str]:
    """Import every module `orchestrate run` may need, for any executor, and build the entry models'
    validators and serializers (built on first use otherwise: entries.py); the modules' names.

    Every module loaded since the command began is vouched for (process/prestart.py's ``vouch``):
    our dependencies, so a run forks its supervisor as a cold run does; what the interpreter's site
    loaded before stays foreign (then the supervisor is spawned, as in a cold run)."""
    import orchestrate

    from .main import main as _cli  # noqa: F401  (the command itself, click and its options)

    for name in [*_modules(orchestrate.__path__[0], "orchestrate."), *_LAZY]:
        with contextlib.suppress(ImportError):  # an optional extra that is not installed
            importlib.import_module(name)
    from .. import entries

    for value in vars(entries).values():
        if isinstance(value, type) and issubclass(value, entries.Model) and value is not entries.Model:
            value.model_rebuild(force=True)
    ours = set(sys.modules) - AT_START
    vouch(ours)
    _VOUCHED_TOPS.update(name.partition(".")[0] for name in ours)
    return sorted(name for name in sys.modules if name == "orchestrate" or name.startswith("orchestrate."))


def _modules(directory: str, prefix: str) -> list[str]:
    """The package's modules, found on disk: every ``.py`` file, in every folder (some are namespace
    packages, which pkgutil does not list; and pkgutil.walk_packages would import every package to
    look inside, the skipped ones too, and with them the Temporal SDK)."""
    found = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_dir() and entry.name.isidentifier():
            name = prefix + entry.name
            if not name.startswith(_SKIPPED):
                found += _modules(entry.path, name + ".")
        elif entry.name.endswith(".py") and entry.name != "__init__.py":
            name = prefix + entry.name[:-3]
            if learnable(name):
                found.append(name)
    return found


def fingerprint() -> dict[str, tuple[int, int]]:
    """Every source file of the package, by its change time and size: an upgrade or an edit shows,
    also of a module no run has loaded yet (a run would load it new beside the old ones)."""
    seen: dict[str, tuple[int, int]] = {}
    for directory, folders, files in os.walk(package_dir()):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)  # noqa: PTH118  (a few hundred per request)
                try:
                    info = os.stat(path)  # noqa: PTH116
                except OSError:
                    continue
                seen[path] = (info.st_mtime_ns, info.st_size)
    return seen


def learnable(name: str) -> bool:
    return all(part.isidentifier() for part in name.split(".")) and not name.startswith(_SKIPPED)


def load_quietly(name: str) -> bool:
    if name in sys.modules:
        return False
    try:
        importlib.import_module(name)
    except Exception:  # whatever it is, the run that needs it loads it itself
        return False
    return True


def vouchable(name: str) -> bool:
    """A module of the standard library, ours, or of a distribution we already vouched for (anyio's
    backend, sqlalchemy's SQLite dialect): what a site's instrumentation brings is not."""
    top = name.partition(".")[0]
    return top in sys.stdlib_module_names or top == "orchestrate" or top in _VOUCHED_TOPS
