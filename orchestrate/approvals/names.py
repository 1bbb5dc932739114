"""Builtins that write the variables their arguments name, and names bash evaluates as code.

``printf -v PATH %s /tmp/evil; git status`` sets ``PATH`` without any ``NAME=value`` in the line,
and ``printf -v 'a[$(rm -rf x)]' 1`` runs ``rm``: bash evaluates an array subscript written in a
quoted argument as arithmetic, and arithmetic runs command substitutions.  The same holds for
``read``, ``mapfile``/``readarray``, ``getopts``, ``wait -p``, ``let``, ``test -v`` and
``unset``/``declare``.  A name such a builtin writes is a variable assignment (allow rules never
approve it); a subscript that is not a plain number, a ``let`` expression, a ``mapfile -C``
callback and a ``declare -i``/``-n`` are code evaluated at run time (a problem: never approved by a
rule, and asked even under ``full`` when deny rules exist)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .words import Word

__all__ = ["Written", "evaluates_name", "written_names"]

_PLAIN_SUBSCRIPT = re.compile(r"[0-9]+|@|\*")
_NUMERIC_LET = re.compile(r"[0-9+\-*/%()<>=!&|^~?:, \t]*")


@dataclass(frozen=True)
class Written:
    names: tuple[str, ...] = ()
    evaluated: str | None = None  # why a value is run as code, if one is


def evaluates_name(text: str) -> bool:
    """Whether bash evaluates part of a variable name as code: ``a[$(cmd)]``, ``a[x]`` (the value
    of ``x`` is arithmetic in turn); ``a[0]``, ``a[@]`` are plain."""
    _, bracket, rest = text.partition("[")
    if not bracket:
        return False
    subscript = rest.split("]", 1)[0]
    return not _PLAIN_SUBSCRIPT.fullmatch(subscript)


# Short options of each builtin that take a value, and those whose value is a variable name.
_VALUE_OPTIONS = {
    "printf": ("v", "v"),
    "read": ("adinNptu", "a"),
    "mapfile": ("dnOsuCc", ""),
    "readarray": ("dnOsuCc", ""),
    "wait": ("p", "p"),
}
_DEFAULT_NAME = {"read": "REPLY", "mapfile": "MAPFILE", "readarray": "MAPFILE"}


def written_names(words: tuple[Word, ...]) -> Written:
    """The variables the simple command ``words`` writes as a builtin (none for other programs)."""
    program = words[0].text if words and words[0].literal else ""
    name = program if "/" not in program else ""  # /usr/bin/printf is no builtin
    args = words[1:]
    if name == "let":
        if all(w.literal and _NUMERIC_LET.fullmatch(w.text) for w in args):
            return Written()
        return Written(names=("(let)",), evaluated="let evaluates its arguments as arithmetic")
    if name in ("test", "["):
        for i, word in enumerate(args[:-1]):
            if word.text in ("-v", "-R") and (not args[i + 1].literal or evaluates_name(args[i + 1].text)):
                return Written(evaluated=f"{name} -v evaluates the subscript of {args[i + 1].text}")
        return Written()
    if name == "getopts":
        return _named(name, args[1:2])
    if name not in _VALUE_OPTIONS:
        return Written()
    takes_value, names_value = _VALUE_OPTIONS[name]
    names: list[Word] = []
    callback = False
    i = 0
    while i < len(args):
        word = args[i]
        text = word.text
        if not word.literal or text == "--" or not text.startswith("-") or len(text) == 1:
            i += text == "--"
            break
        for j, letter in enumerate(text[1:], start=1):
            if letter in takes_value:
                attached = j + 1 < len(text)
                value = Word(text[j + 1 :]) if attached else args[i + 1] if i + 1 < len(args) else Word("")
                i += 0 if attached else 1
                callback = callback or letter == "C"
                if letter in names_value:
                    names.append(value)
                break
        i += 1
    operands = args[i:]
    if name == "printf" or name == "wait":
        return _named(name, tuple(names))
    if name in ("mapfile", "readarray"):
        written = _named(name, operands[:1] or (Word(_DEFAULT_NAME[name]),))
        if callback:
            return Written(written.names, f"{name} -C runs its callback as code")
        return written
    return _named(name, (*names, *operands) or (Word(_DEFAULT_NAME[name]),))


def _named(builtin: str, names: tuple[Word, ...]) -> Written:
    evaluated = next(
        (f"{builtin} writes {w.text}, whose subscript is evaluated as code" for w in names if _risky(w)),
        None,
    )
    return Written(names=tuple(w.text.partition("[")[0] for w in names), evaluated=evaluated)


def _risky(word: Word) -> bool:
    return not word.literal or evaluates_name(word.text)
