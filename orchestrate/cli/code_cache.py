"""The code that Python compiles again at every start of the command, kept from one start to the next.

Two kinds of source text are compiled at run time, not read from bytecode files, on the way to an
agent's first entry: :mod:`dataclasses` writes each class's ``__init__``, ``__repr__``, ``__eq__``
(and for frozen ones ``__setattr__``, ``__delattr__``, ``__hash__``) as text and ``exec``-s it, ~450
functions for the ~100 dataclasses of pydantic, annotated_types, anyio and ours; and :mod:`typing`
compiles each string annotation pydantic evaluates (a ``ForwardRef`` each, ~900, ~400 of them
distinct, with ``from __future__ import annotations``).  Measured with callgrind, a Codex run to its
first entry: the builtin ``compile`` took 201 M of the 933 M instructions of our process; with the
codes kept, 761 M (reading them back costs about a tenth of compiling them): ~45-50 ms of CPU less
beside the agent's own start on a 2-core machine.
The texts are the same at every start of the same install, and so are their code objects: this
keeps them, by their exact text, in a file beside this package's bytecode, the way the import system
keeps a module's, and hands them back instead of compiling.

How: the two modules' own ``exec`` and ``compile`` (module globals, which shadow the builtins for
their code only) become this module's :func:`_exec` and :func:`_compile`, which look the text up
first.  Nothing else changes: the same text compiled with the same flags (those modules use no
``from __future__`` import, checked before either is touched: then ``dont_inherit`` is exact) and
the same file name (``<string>``) gives the same code object; anything but a plain string, another
file name, flags or optimization level goes to the builtin as it came.

The file (``cli/__pycache__/code_cache.<tag>.codes``, ``.opt-1.codes`` under ``-O`` as a ``.pyc``
is named, under ``sys.pycache_prefix`` when it is set) is trusted as the ``.pyc`` files beside it
are: whoever can write it can write those, and it is written as they are (the source's mode, a
temporary file made exclusively, never through a link planted at its name).  It starts with
the interpreter's bytecode magic number (another version's is ignored), it is read whole and once,
anything unreadable in it is ignored (the texts are compiled, as before), and it is written only by
the process that installed this, at its exit, when something new was compiled, and not at all under
``PYTHONDONTWRITEBYTECODE`` (the import system's rule for ``.pyc`` files too): to a temporary file
renamed over it, so a reader never sees half of one.  It keeps at most :data:`MAX_CODES` texts.
"""

# No `from __future__ import annotations` here: nothing this module compiles should even seem to
# depend on its own future flags (it passes dont_inherit anyway).  os, not pathlib: as the rest of
# what runs this early (cli/early.py, cli/pydantic_plugins.py).
# ruff: noqa: PTH103, PTH105, PTH108, PTH116, PTH118, PTH120, PTH123

import builtins
import marshal
import os
import sys

TYPE_CHECKING = False  # (typing is not loaded yet when the command installs this)
if TYPE_CHECKING:
    from types import CodeType
    from typing import Any

__all__ = ["MAX_CODES", "cache_path", "install", "stats"]

MAX_CODES = 8192
"""Texts kept at most (every command together makes ~920 distinct ones); past it, only those this
process used (and new ones), as when more of those read were unused than used."""
_FORMAT = b"oc1\n"  # this file's own layout, after the interpreter's magic number
_code_type = type(compile("", "<string>", "exec"))
_builtin_exec = builtins.exec
_builtin_compile = builtins.compile

_codes: "dict[tuple[str, str], CodeType]" = {}  # (mode, text) -> its code, as read from the file
_new: "dict[tuple[str, str], CodeType]" = {}  # compiled by this process
_used: "set[tuple[str, str]]" = set()
_installed: "list[int]" = []  # the pid of the process that installed this, once it has
_counts = {"hits": 0, "misses": 0}


def cache_path() -> "str | None":
    """Where the codes are kept for this interpreter (None: it keeps no bytecode files at all).

    One file per optimization level, as the import system keeps one ``.pyc`` per level: ``-O``
    compiles ``__debug__`` to False and drops asserts (``-OO`` docstrings too), so a code compiled
    at one level is not the code of the same text at another."""
    external = sys.modules["_frozen_importlib_external"]
    try:
        pyc: str = external.cache_from_source(__file__)
    except (NotImplementedError, ValueError):  # (sys.implementation.cache_tag is None)
        return None
    level = sys.flags.optimize  # (what compile's optimize=-1 means, and cache_from_source's names)
    name = f"code_cache.{sys.implementation.cache_tag}{f'.opt-{level}' if level else ''}.codes"
    return os.path.join(os.path.dirname(pyc), name)


def install() -> None:
    """Load the kept codes and stand in for ``exec`` in :mod:`dataclasses` and ``compile`` in
    :mod:`typing` (importing them: call this when they are about to be loaded anyway).  Once per
    process; a module compiled with a future flag is left alone."""
    if _installed:
        return
    _installed.append(os.getpid())
    import __future__

    import dataclasses
    import typing

    features = {name: getattr(__future__, name) for name in __future__.all_feature_names}
    patched = False
    for module, name, stand_in in ((dataclasses, "exec", _exec), (typing, "compile", _compile)):
        if any(module.__dict__.get(feature) is value for feature, value in features.items()):
            continue
        if name in module.__dict__:  # its own already: not ours to replace
            continue
        setattr(module, name, stand_in)
        patched = True
    if not patched:
        return
    path = cache_path()
    if path is not None:
        _codes.update(_read(path))
        import atexit

        atexit.register(_save, path)


def stats() -> "dict[str, int]":
    """Texts found kept (``hits``) and compiled (``misses``) by this process so far."""
    return dict(_counts)


def _code(text: str, mode: str) -> "CodeType":
    key = (mode, text)
    code = _codes.get(key)
    if code is None:
        code = _new.get(key)
        if code is None:
            _counts["misses"] += 1
            code = _builtin_compile(text, "<string>", mode, 0, True)
            if len(_new) < MAX_CODES:  # (serve lives for days: no more than the file would keep)
                _new[key] = code
            return code
    _counts["hits"] += 1
    _used.add(key)
    return code


def _exec(source: "Any", globals: "Any" = None, locals: "Any" = None, /, **kwargs: "Any") -> None:
    """``exec`` for :mod:`dataclasses`: a string is looked up first; the rest as the builtin does."""
    if type(source) is str and not kwargs:  # (closure= with a string: the builtin's own refusal)
        source = _code(source, "exec")
    if globals is None:  # the caller's namespaces, as the builtin would take them (not ours)
        frame = sys._getframe(1)
        globals = frame.f_globals
        if locals is None:
            locals = frame.f_locals
    _builtin_exec(source, globals, locals, **kwargs)


def _compile(
    source: "Any",
    filename: "Any",
    mode: str,
    flags: int = 0,
    dont_inherit: bool = False,
    optimize: int = -1,
    **kwargs: "Any",
) -> "Any":
    """``compile`` for :mod:`typing`: a plain expression or module text is looked up first."""
    plain = not flags and optimize == -1 and not kwargs
    if plain and type(source) is str and filename == "<string>" and mode in ("eval", "exec"):
        return _code(source, mode)
    # (dont_inherit: the caller's module has no future flag, checked by install; this one's don't count)
    return _builtin_compile(source, filename, mode, flags, True, optimize, **kwargs)


def _read(path: str) -> "dict[tuple[str, str], CodeType]":
    """The codes kept in ``path``: nothing if it is missing, another version's or damaged."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return {}
    header = _header()
    if not data.startswith(header):
        return {}
    try:
        loaded = marshal.loads(memoryview(data)[len(header) :])
    except Exception:  # (marshal raises EOFError, ValueError, TypeError ... on a damaged file)
        return {}
    if type(loaded) is not dict:
        return {}
    return {
        key: code
        for key, code in loaded.items()
        if type(key) is tuple
        and len(key) == 2
        and key[0] in ("eval", "exec")
        and type(key[1]) is str
        and type(code) is _code_type
    }


def _save(path: str) -> None:
    """Keep what this process compiled, with what was kept before (at its exit)."""
    if not _new or not _installed or _installed[0] != os.getpid() or sys.dont_write_bytecode:
        return
    kept = {**_codes, **_new}
    # Texts this process did not ask for (another command's, or an old pydantic's that no start
    # asks for again) are read at every start: kept while they are fewer than those it used, so an
    # upgrade's leftovers never cost more to read than what the file saves (a code is read in about
    # a tenth of the time it is compiled in: 887 texts, timed alternately at load 4-6).  The
    # commands' sets are nearly one (every command loads the CLI): none drops another's.
    live = {key: code for key, code in kept.items() if key in _used or key in _new}
    if len(kept) > MAX_CODES or len(kept) - len(live) > len(live):
        kept = live
        if len(kept) > MAX_CODES:
            kept = dict(list(kept.items())[:MAX_CODES])
    # Made as the import system makes a .pyc's temporary file: exclusively (never through a link
    # planted at its name, never into another writer's file: two containers sharing a volume are
    # each their own pid 1), with the source's mode.  Before the codes are marshalled: a read-only
    # install (root's, run by a user) costs no more than the failed open at every exit.
    temporary = _temporary(path)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _mode())
    except OSError:  # a read-only install, a name taken: the next start compiles
        return
    try:
        with open(fd, "wb") as f:
            f.write(_header() + marshal.dumps(kept))
        os.replace(temporary, path)
    except BaseException as exc:  # a full disk, a directory in its place, Ctrl-C at exit
        try:  # noqa: SIM105 - (contextlib is not loaded by then in every command)
            os.unlink(temporary)
        except OSError:
            pass
        if not isinstance(exc, (OSError, ValueError)):
            raise
    else:
        _new.clear()


def _temporary(path: str) -> str:
    """A name of this write's own beside ``path`` (a pid alone is the same in every container, and
    a stale file of a killed write would stop every later one).  The clock, not os.urandom: that
    may block until the kernel's pool is ready, early in a boot; O_EXCL makes any name safe."""
    import time

    return f"{path}.{os.getpid()}.{time.time_ns():x}.tmp"


def _mode() -> int:
    """The mode a .pyc of this module gets (importlib's ``_calc_mode``): the source's, and the
    owner's write; the umask applies as well."""
    try:
        mode = os.stat(__file__).st_mode | 0o200
    except OSError:
        mode = 0o666
    return mode & 0o666


def _header() -> bytes:
    magic: bytes = sys.modules["_frozen_importlib_external"].MAGIC_NUMBER
    return magic + _FORMAT
