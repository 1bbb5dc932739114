"""Command rules: a program and its arguments, judged against one parsed simple command.

A rule is written as shell words (``git status*``, ``rm -rf*``, ``sudo *``); its first word names
the program.  Allow rules and deny rules read the same words differently, each erring on the side
of refusing:

* allow: the program exactly as written (``pytest*`` does not allow ``./pytest``), then each rule
  word matches the argument at its place as a glob; a final word ending in ``*`` (or a final
  ``*``) also lets any further arguments follow.  ``git status*``: program ``git``, first argument
  matching ``status*``, anything after.  A word the shell only knows at run time (``$X``, a glob)
  is allowed only in that open tail.
* deny: the program by its basename (``/bin/rm``, ``\\rm`` and ``"rm"`` are ``rm``); every flag of
  the rule must be present somewhere: short flags as a set of letters (``-rf`` = ``-fr`` =
  ``-r -f``, with each tool's synonyms such as ``-R``), long flags by name or known short
  equivalent (``--recursive --force``) or GNU abbreviation (``--rec``); the rule's other words
  must appear in order among the arguments.  Extra arguments never save a command.  When a
  word only known at run time could supply what is missing, the rule *may* match.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from ..errors import ConfigError
from .words import SimpleCommand, Word

__all__ = ["CommandPattern", "DenyMatch", "has_risky_option"]

DenyMatch = Literal["yes", "maybe", "no"]

# Tools whose options are single-dash words (find -delete), compared whole, never as letter sets.
_WORD_OPTIONS = frozenset({"find"})
# Short flags that mean the same as another, per tool.
_SHORT_SYNONYMS: dict[str, dict[str, str]] = {"rm": {"R": "r"}, "cp": {"R": "r"}}
# Long options and the short flag they equal, per tool.
_LONG_FLAGS: dict[str, dict[str, str]] = {
    "rm": {"--recursive": "r", "--force": "f", "--dir": "d", "--interactive": "i", "--verbose": "v"},
    "cp": {"--recursive": "r", "--force": "f", "--archive": "a", "--link": "l", "--symbolic-link": "s"},
    "mv": {"--force": "f", "--interactive": "i", "--no-clobber": "n"},
    "ln": {"--symbolic": "s", "--force": "f"},
    "chmod": {"--recursive": "R"},
    "chown": {"--recursive": "R"},
    "chgrp": {"--recursive": "R"},
    "git": {"--force": "f", "--delete": "d", "--all": "a"},
    "rsync": {"--recursive": "r", "--archive": "a", "--verbose": "v"},
    "curl": {"--output": "o", "--remote-name": "O", "--data": "d", "--request": "X", "--upload-file": "T"},
    "tar": {"--extract": "x", "--create": "c", "--file": "f", "--gzip": "z"},
    "kill": {"--signal": "s"},
    "shred": {"--remove": "u", "--zero": "z", "--force": "f"},
    "sed": {"--in-place": "i"},
}
# Options that make a harmless-looking program delete, write or load what its allow rule's author
# did not mean (pytest removes its --basetemp; git diff --output writes anywhere; rg --pre runs a
# program).  In a rule's open tail they are not approved: the person is asked.  A rule that names
# the option itself (``pytest --basetemp=*``) still allows it.  The (option, exempt value prefix).
_RISKY_OPTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "pytest": (("--basetemp", ""), ("-p", "no:"), ("--rootdir", ""), ("--confcutdir", "")),
    "py.test": (("--basetemp", ""), ("-p", "no:")),
    "git": (("--output", ""), ("--exec-path", ""), ("--upload-pack", ""), ("--receive-pack", "")),
    "rg": (("--pre", ""),),
    "sort": (("-o", ""), ("--output", "")),
    "sed": (("-i", ""), ("--in-place", "")),
    "find": (("-delete", ""), ("-fprint", ""), ("-fprint0", ""), ("-fprintf", ""), ("-fls", "")),
}
_GUESSED_WORDS = 64  # arguments looked at after each possible program in unparsed text
_OPERATOR_TOKENS = frozenset({";", "|", "||", "&", "&&", ">", ">>", "<", "<<", "(", ")", "&>", ";;"})


@dataclass(frozen=True)
class CommandPattern:
    """One command rule.  Build with :meth:`parse`, which rejects what is not one simple command."""

    text: str
    program: str
    args: tuple[str, ...]
    open_end: bool

    @classmethod
    def parse(cls, text: str, where: str) -> CommandPattern:
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError as exc:
            raise ConfigError(f"[{where}] command rule {text!r} is not shell words: {exc}") from exc
        if not tokens:
            raise ConfigError(f"[{where}] command rule {text!r} is empty")
        operators = [t for t in tokens if t in _OPERATOR_TOKENS]
        if operators:
            raise ConfigError(
                f"[{where}] command rule {text!r} has the shell operator {operators[0]!r}: a rule names one "
                "program and its arguments (every command of a line is judged on its own)"
            )
        open_end = len(tokens) > 1 and tokens[-1] == "*"
        if open_end:
            tokens.pop()
        open_end = open_end or tokens[-1].endswith("*")
        return cls(text=text, program=tokens[0], args=tuple(tokens[1:]), open_end=open_end)

    # --- allow --------------------------------------------------------------------------------

    def allows(self, command: SimpleCommand) -> bool:
        """Whether this allow rule approves ``command`` (a program and arguments known exactly)."""
        program = command.program
        if program is None or not program.literal:
            return False
        if "/" not in self.program and "/" in program.text:
            return False  # ./pytest or /tmp/x/pytest is not the pytest the rule means
        if not fnmatchcase(program.text, self.program):
            return False
        args = command.words[1:]
        if len(args) < len(self.args) or (len(args) > len(self.args) and not self.open_end):
            return False
        if not all(a.literal and fnmatchcase(a.text, p) for a, p in zip(args, self.args, strict=False)):
            return False
        # The last rule word may be a glob that matched a risky option itself (pytest*): judge it too.
        tail = args[max(len(self.args) - 1, 0) :] if self.open_end else ()
        return not _risky_option(posixpath.basename(program.text), tail, self.args)

    # --- deny ---------------------------------------------------------------------------------

    def denies(self, command: SimpleCommand) -> DenyMatch:
        """Whether this deny rule forbids ``command``: yes, maybe (a word only known at run time
        could make it so), or no.  A command guessed from unreadable text is never a "maybe": its
        line is refused by rules already."""
        if not command.any_start:
            return self._denies(command.words)
        program = posixpath.basename(self.program)
        starts = (i for i, w in enumerate(command.words) if fnmatchcase(posixpath.basename(w.text), program))
        guesses = (command.words[i : i + _GUESSED_WORDS] for i in starts)
        return "yes" if any(self._denies(words) == "yes" for words in guesses) else "no"

    def _denies(self, words: tuple[Word, ...]) -> DenyMatch:
        if not words:
            return "no"
        program = words[0]
        if not program.literal:
            return "maybe"
        name = posixpath.basename(program.text)
        if not fnmatchcase(name, posixpath.basename(self.program)):
            return "no"
        seen = _Arguments.of(name, words[1:])
        # A short flag cluster's trailing * adds nothing: more letters never save a command.
        wanted = _Arguments.of(name, tuple(Word(_without_star(a)) for a in self.args))
        missing_flags = bool(wanted.letters - seen.letters) or any(
            not seen.has_long(flag, name) for flag in wanted.longs
        )
        missing_words = not _in_order(wanted.positional, seen.positional)
        if not missing_flags and not missing_words:
            return "yes"
        flaggy = any(w.could_be_flag() for w in seen.dynamic)
        if (not missing_flags or flaggy) and (not missing_words or seen.dynamic):
            return "maybe"
        return "no"


@dataclass(frozen=True)
class _Arguments:
    """A command's arguments sorted for deny rules: short flag letters (synonyms folded), long
    options, other words, and words only known at run time."""

    letters: frozenset[str]
    longs: tuple[str, ...]
    positional: tuple[str, ...]
    dynamic: tuple[Word, ...]

    @classmethod
    def of(cls, program: str, args: tuple[Word, ...]) -> _Arguments:
        letters: set[str] = set()
        longs: list[str] = []
        positional: list[str] = []
        dynamic: list[Word] = []
        synonyms = _SHORT_SYNONYMS.get(program, {})
        known_longs = _LONG_FLAGS.get(program, {})
        options_end = False
        for word in args:
            text = word.text
            if not word.literal:
                dynamic.append(word)
            elif options_end or not text.startswith("-") or text == "-":
                positional.append(text)
            elif text == "--":
                options_end = True
            elif text.startswith("--") or program in _WORD_OPTIONS:
                name = text.partition("=")[0]
                longs.append(name)
                letters.update(known_longs[k] for k in known_longs if _abbreviates(name, k))
            else:
                letters.update(synonyms.get(c, c) for c in text[1:])
        return cls(frozenset(letters), tuple(longs), tuple(positional), tuple(dynamic))

    def has_long(self, flag: str, program: str) -> bool:
        """A long flag of a rule (a glob): present by name, by GNU abbreviation, or as the short
        flag it equals."""
        short = _LONG_FLAGS.get(program, {}).get(flag.rstrip("*"))
        if short is not None and short in self.letters:
            return True
        return any(fnmatchcase(name, flag) or _abbreviates(name, flag.rstrip("*")) for name in self.longs)


def has_risky_option(command: SimpleCommand) -> bool:
    """Whether ``command`` uses an option of :data:`_RISKY_OPTIONS` (what "always" never covers)."""
    program = command.program
    if program is None:
        return False
    return _risky_option(posixpath.basename(program.text), command.words[1:], ())


def _risky_option(program: str, args: tuple[Word, ...], named: tuple[str, ...]) -> bool:
    """Whether ``args`` hold one of ``program``'s risky options that the rule does not name."""
    for option, exempt in _RISKY_OPTIONS.get(program, ()):
        if any(w.startswith(option) for w in named):
            continue
        for i, word in enumerate(args):
            text = word.text
            if option.startswith("--") or len(option) > 2:
                hit, value = text == option or text.startswith(option + "="), text.partition("=")[2]
                if text == option and i + 1 < len(args):
                    value = args[i + 1].text
            else:  # a short option, alone or in a cluster: -p VALUE, -pVALUE, -qp VALUE
                letter = option[1]
                hit = text.startswith("-") and not text.startswith("--") and letter in text[1:]
                value = text.partition(letter)[2] or (args[i + 1].text if i + 1 < len(args) else "")
            if hit and not (exempt and value.startswith(exempt)):
                return True
    return False


def _without_star(arg: str) -> str:
    return arg.rstrip("*") if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1 else arg


def _abbreviates(given: str, full: str) -> bool:
    """GNU getopt_long accepts any unambiguous prefix: ``--rec`` is ``--recursive``."""
    return len(given) > 3 and full.startswith(given)


def _in_order(wanted: tuple[str, ...], seen: tuple[str, ...]) -> bool:
    """Whether each wanted glob matches a word of ``seen``, in order (other words between)."""
    it = iter(seen)
    return all(any(fnmatchcase(word, pattern) for word in it) for pattern in wanted)
