"""pydantic's plugin search, without ``importlib.metadata`` when no plugin is installed.

pydantic looks for plugins (entry points of the group ``pydantic``) when it builds its first
model, with ``importlib.metadata.entry_points()``: importing it (email, zipfile, csv ...) and
reading the metadata of every installed distribution costs ~30 ms of CPU, about a tenth of what
``orchestrate run`` spends before its agent's first entry, and on a 2-core machine the agent's
own start-up pays part of it.  The command (cli/__init__.py) puts this module's
:func:`get_plugins` where pydantic imports its loader from: it looks, with plain directory
listings, for a distribution whose ``entry_points.txt`` names ``pydantic`` at all, on every path
``importlib.metadata`` would search.  Finding one, or anything it cannot read as plainly as that
(a zip or egg on ``sys.path``, a finder of its own that lists distributions), it hands over to
pydantic's own loader, which then loads exactly the plugins it would have: the search only ever
errs towards the slow, exact path.  ``PYDANTIC_DISABLE_PLUGINS`` is honoured as pydantic does.
"""

# os.path, not pathlib: a Path made for each of the ~300 names searched would cost several times as much.
# ruff: noqa: PTH110, PTH118, PTH119, PTH208

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # (typing is not loaded yet when the command installs this)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import ModuleType
    from typing import Any

__all__ = ["LOADER", "get_plugins", "install", "plugins_declared"]

LOADER = "pydantic.plugin._loader"
# An entry_points.txt longer than this is not read: the exact search decides (they are a few lines).
_MAX_READ = 1 << 20
_DISABLED = ("__all__", "1", "true")  # pydantic's own values for "no plugins at all"
_declared: list[bool] = []  # the answer, once found (pydantic, too, looks once per process)
_module_spec = type(sys.__spec__)  # importlib.machinery.ModuleSpec, without importing importlib


def install() -> None:
    """Have the stand-in imported in place of pydantic's loader, when pydantic first asks for it
    (unless the real one is loaded already): a finder first in ``sys.meta_path``, which steps
    aside once it has served (nothing of pydantic's is in ``sys.modules`` before pydantic is)."""
    if LOADER not in sys.modules and _StandIn not in sys.meta_path:
        sys.meta_path.insert(0, _StandIn)


class _StandIn:
    """Finder and loader of the stand-in: its ``get_plugins`` is this module's :func:`get_plugins`,
    any other name is the real loader's."""

    @classmethod
    def find_spec(cls, name: str, path: object = None, target: object = None) -> Any:
        if name != LOADER:
            return None
        _step_aside()  # once: the real loader is found as usual from now on
        return _module_spec(name, cls)  # type: ignore[arg-type]  # (a loader by protocol)

    @staticmethod
    def create_module(spec: object) -> None:
        return None  # (the usual module object)

    @staticmethod
    def exec_module(module: ModuleType) -> None:
        module.get_plugins = get_plugins  # type: ignore[attr-defined]
        setattr(module, "__getattr__", _from_real_loader)  # noqa: B010  # (PEP 562; mypy refuses the plain form)


def get_plugins() -> Iterable[Any]:
    """What ``pydantic.plugin._loader.get_plugins`` returns: nothing when no installed distribution
    declares a pydantic plugin, else the real loader's answer."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") in _DISABLED:
        return ()
    if not _declared:
        _declared.append(plugins_declared())
    if not _declared[0]:
        return ()
    found: Iterable[Any] = _real_loader().get_plugins()
    return found


def plugins_declared() -> bool:
    """Whether ``importlib.metadata`` might find an entry point of the group ``pydantic``: True as
    soon as anything on its search path is not a plain directory of ``*.dist-info`` and
    ``*.egg-info`` folders whose ``entry_points.txt`` (when there is one) never says pydantic."""
    path_finder = getattr(sys.modules.get("_frozen_importlib_external"), "PathFinder", None)
    if path_finder is None:
        return True
    for finder in sys.meta_path:  # importlib.metadata asks every finder that lists distributions
        if finder is not path_finder and hasattr(finder, "find_distributions"):
            return True
    return any(not isinstance(entry, str) or _declares(entry or ".") for entry in sys.path)


def _declares(root: str) -> bool:
    try:
        names = os.listdir(root)
    except OSError:
        return os.path.exists(root)  # a zip (importlib.metadata reads those): the exact search
    if os.path.basename(root).lower().endswith(".egg"):
        return True
    for name in names:
        if not name.lower().endswith((".dist-info", ".egg-info")):
            continue
        file = os.path.join(root, name, "entry_points.txt")
        if not os.access(file, os.F_OK):  # (most have none: no exception raised for each)
            continue
        try:
            fd = os.open(file, os.O_RDONLY)  # (not open(): a buffered file object costs 4x as much)
            try:
                text = _read(fd)
            finally:
                os.close(fd)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
            continue  # what importlib.metadata skips too
        except OSError:
            return True
        if len(text) > _MAX_READ or b"pydantic" in text.lower():
            return True
    return False


def _read(fd: int) -> bytes:
    """The file's first ``_MAX_READ + 1`` bytes (all of it, when shorter)."""
    parts: list[bytes] = []
    size = 0
    while size <= _MAX_READ:
        part = os.read(fd, 1 << 16)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def _real_loader() -> ModuleType:
    """pydantic's own loader, in ``sys.modules`` from now on in place of the stand-in."""
    if getattr(sys.modules.get(LOADER), "get_plugins", None) is get_plugins:
        del sys.modules[LOADER]
    _step_aside()
    __import__(LOADER)
    return sys.modules[LOADER]


def _step_aside() -> None:
    # (not contextlib.suppress: this module loads before the agent's early spawn, contextlib does not)
    try:  # noqa: SIM105
        sys.meta_path.remove(_StandIn)
    except ValueError:
        pass


def _from_real_loader(name: str) -> Any:
    if name.startswith("__"):  # (the import system's own probes: __path__, __spec__ ...)
        raise AttributeError(name)
    return getattr(_real_loader(), name)
