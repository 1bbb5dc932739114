"""Seeing through wrappers: ``sudo``, ``env``, ``timeout``, ``xargs``, ``bash -c`` ... run another
command (or a script) given in their arguments; the rules must judge that command too.

Each wrapper's options are read as its manual describes them, so ``timeout -s KILL 5 rm -rf x`` runs
``rm -rf x`` and ``env -u HOME FOO=1 rm`` runs ``rm``.  An option we do not know makes the wrapper
opaque to allow rules, and deny rules then look at every later word as a possible program."""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from .words import Word

__all__ = ["SHELLS", "Unwrapped", "unwrap"]

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "rbash"})

_STDIN = Word("<stdin>", literal=False)  # what xargs appends from its input


@dataclass(frozen=True)
class Unwrapped:
    """What a wrapper runs.  ``inner``: the commands it runs (find may run several); ``script``: shell
    text it runs (``bash -c``, ``eval``, ``env -S``, ``watch``); ``assignments``: environment it
    changes (``env FOO=1``, ``env -u``, ``env -C``), which allow rules never approve."""

    inner: tuple[tuple[Word, ...], ...] = ()
    script: Word | None = None
    transparent: bool = True
    assignments: tuple[str, ...] = ()
    reads_stdin: bool = False
    unknown_option: bool = False
    problems: tuple[str, ...] = ()


_Handler: TypeAlias = Callable[[tuple[Word, ...]], "Unwrapped | None"]


@dataclass(frozen=True)
class _Options:
    """A getopt-style option syntax: short options taking a value, short flags, long options
    taking a value, long flags.  ``digits``: ``-10`` is a flag (nice)."""

    short_value: str = ""
    short_flags: str = ""
    long_value: frozenset[str] = frozenset()
    long_flags: frozenset[str] = frozenset()
    digits: bool = False
    plus: bool = False  # shells: +o, +x turn options off


def _scan(args: tuple[Word, ...], spec: _Options) -> tuple[int, list[tuple[str, str]], bool]:
    """Read options from the front of ``args``: (index of the first operand, the (option, value)
    pairs seen, whether an unknown or unreadable option was met)."""
    seen: list[tuple[str, str]] = []
    unknown = False
    i = 0
    while i < len(args):
        word = args[i]
        text = word.text
        if not word.literal:
            if word.could_be_flag():
                unknown = True
            return i, seen, unknown
        if text == "--":
            return i + 1, seen, unknown
        if text.startswith("--") and len(text) > 2:
            name, eq, value = text.partition("=")
            if name in spec.long_value and not eq:
                value = args[i + 1].text if i + 1 < len(args) else ""
                i += 1
            elif name not in spec.long_value and name not in spec.long_flags:
                unknown = True
            seen.append((name, value))
            i += 1
            continue
        if not (text.startswith("-") or (spec.plus and text.startswith("+"))) or len(text) == 1:
            return i, seen, unknown
        if spec.digits and text[1:].isdigit():
            i += 1
            continue
        for j, letter in enumerate(text[1:], start=1):
            if letter in spec.short_value:
                value = text[j + 1 :]
                if not value:
                    value = args[i + 1].text if i + 1 < len(args) else ""
                    i += 1
                seen.append(("-" + letter, value))
                break
            if letter not in spec.short_flags:
                unknown = True
            seen.append(("-" + letter, ""))
        i += 1
    return i, seen, unknown


def _split_assignments(args: tuple[Word, ...]) -> tuple[int, list[str]]:
    """Leading ``NAME=value`` words (env, sudo): the index after them and the names."""
    names = []
    i = 0
    while i < len(args) and args[i].literal and _is_assignment(args[i].text):
        names.append(args[i].text.partition("=")[0])
        i += 1
    return i, names


def _is_assignment(text: str) -> bool:
    name, eq, _ = text.partition("=")
    return bool(eq) and name.replace("_", "a").isalnum() and not name[0].isdigit()


_SUDO = _Options(
    short_value="ugCDhprtUTc",
    short_flags="AbEeHiKklnPSsVvBN",
    long_value=frozenset(
        {"--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type"}
        | {"--other-user", "--command-timeout"}
    ),
    long_flags=frozenset({"--preserve-env", "--login", "--shell", "--non-interactive", "--stdin"}),
)
_DOAS = _Options(short_value="uC", short_flags="nsL")
_PKEXEC = _Options(
    long_value=frozenset({"--user"}), long_flags=frozenset({"--keep-cwd", "--disable-internal-agent"})
)
_ENV = _Options(
    short_value="uCS",
    short_flags="i0v",
    long_value=frozenset({"--unset", "--chdir", "--split-string"}),
    long_flags=frozenset({"--ignore-environment", "--null", "--debug"}),
)
_COMMAND = _Options(short_flags="pvV")
_EXEC = _Options(short_value="a", short_flags="cl")
_NICE = _Options(short_value="n", long_value=frozenset({"--adjustment"}), digits=True)
_IONICE = _Options(short_value="cnpPu", short_flags="t")
_SETSID = _Options(short_flags="cfw")
_TIMEOUT = _Options(
    short_value="sk",
    short_flags="v",
    long_value=frozenset({"--signal", "--kill-after"}),
    long_flags=frozenset({"--foreground", "--preserve-status", "--verbose"}),
)
_TIME = _Options(short_flags="p")
_STDBUF = _Options(short_value="ioe", long_value=frozenset({"--input", "--output", "--error"}))
_XARGS = _Options(
    short_value="adEILnPs",
    short_flags="0oprtx",
    long_value=frozenset(
        {"--arg-file", "--delimiter", "--max-lines", "--max-args", "--max-procs", "--max-chars"}
        | {"--process-slot-var"}
    ),
    long_flags=frozenset(
        {"--null", "--no-run-if-empty", "--verbose", "--interactive", "--exit", "--open-tty", "--show-limits"}
    ),
)
_WATCH = _Options(
    short_value="nq",
    short_flags="bcCdegtpwx",
    long_value=frozenset({"--interval"}),
    long_flags=frozenset(
        {"--beep", "--color", "--no-color", "--differences", "--errexit", "--chgexit", "--no-title"}
        | {"--precise", "--no-wrap", "--exec", "--no-linewrap"}
    ),
)
_SHELL = _Options(
    short_value="oO",
    short_flags="abcefhiklmnprstuvxBCEHPT",
    long_value=frozenset({"--rcfile", "--init-file"}),
    long_flags=frozenset(
        {"--login", "--norc", "--noprofile", "--posix", "--noediting", "--restricted", "--verbose"}
        | {"--debugger", "--pretty-print", "--dump-strings", "--dump-po-strings", "--no-rcs"}
    ),
)


def unwrap(words: tuple[Word, ...]) -> Unwrapped | None:
    """What the command ``words`` runs in turn, or None when its program wraps nothing."""
    program = words[0] if words else None
    if program is None or not program.literal:
        return None
    name = posixpath.basename(program.text)
    args = words[1:]
    handler = _HANDLERS.get(name)
    if handler is not None:
        return handler(args)
    if name in SHELLS:
        return _shell(args, name)
    return None


def _plain(spec: _Options, transparent: bool = True, operands: int = 0) -> _Handler:
    """A wrapper whose command follows its options (and ``operands`` fixed words, as timeout's
    duration)."""

    def handle(args: tuple[Word, ...]) -> Unwrapped:
        start, _, unknown = _scan(args, spec)
        inner = args[start + operands :]
        return Unwrapped(
            inner=(inner,) if inner else (),
            transparent=transparent and not unknown and bool(inner),
            unknown_option=unknown,
        )

    return handle


def _sudo_like(spec: _Options) -> _Handler:
    """sudo, doas, pkexec: the wrapper itself must be allowed (never transparent); ``VAR=x`` after
    the options sets the command's environment."""

    def handle(args: tuple[Word, ...]) -> Unwrapped:
        start, _, unknown = _scan(args, spec)
        skip, names = _split_assignments(args[start:])
        inner = args[start + skip :]
        return Unwrapped(
            inner=(inner,) if inner else (),
            transparent=False,
            assignments=tuple(names),
            unknown_option=unknown,
        )

    return handle


def _env(args: tuple[Word, ...]) -> Unwrapped:
    start, seen, unknown = _scan(args, _ENV)
    skip, names = _split_assignments(args[start:])
    changed = list(names)
    script = None
    for option, value in seen:
        if option in ("-u", "--unset"):
            changed.append(value)
        elif option in ("-C", "--chdir"):
            changed.append("(working directory)")
        elif option in ("-i", "--ignore-environment"):
            changed.append("(whole environment)")
        elif option in ("-S", "--split-string"):
            script = Word(value)
    inner = args[start + skip :]
    if script is not None:
        # env -S 'a b' c runs "a b" split into words, then c: parse the whole as one line.
        script = Word(" ".join([script.text, *(w.text for w in inner)]), all(w.literal for w in inner))
        inner = ()
    return Unwrapped(
        inner=(inner,) if inner else (),
        script=script,
        transparent=not unknown and (bool(inner) or script is not None),
        assignments=tuple(changed),
        unknown_option=unknown,
    )


def _xargs(args: tuple[Word, ...]) -> Unwrapped:
    start, seen, unknown = _scan(args, _XARGS)
    inner = args[start:] or (Word("echo"),)
    replace = next((value or "{}" for option, value in seen if option in ("-I", "-i", "--replace")), None)
    problems: tuple[str, ...] = ()
    if replace is not None and inner[0].literal and replace in inner[0].text:
        problems = (f"xargs makes the program from its input: {inner[0].text}",)
    # xargs appends words read from its input: unknown ones, which may even be flags.
    return Unwrapped(
        inner=((*inner, _STDIN),), transparent=not unknown, unknown_option=unknown, problems=problems
    )


def _watch(args: tuple[Word, ...]) -> Unwrapped:
    start, seen, unknown = _scan(args, _WATCH)
    rest = args[start:]
    if any(option in ("-x", "--exec") for option, _ in seen):
        return Unwrapped(inner=(rest,) if rest else (), transparent=not unknown, unknown_option=unknown)
    # Without -x, watch joins its arguments and hands them to sh -c.
    script = Word(" ".join(w.text for w in rest), all(w.literal for w in rest)) if rest else None
    return Unwrapped(script=script, transparent=not unknown and script is not None, unknown_option=unknown)


def _eval(args: tuple[Word, ...]) -> Unwrapped:
    if not args:
        return Unwrapped(transparent=False)
    return Unwrapped(script=Word(" ".join(w.text for w in args), all(w.literal for w in args)))


def _shell(args: tuple[Word, ...], name: str) -> Unwrapped | None:
    """``bash -c SCRIPT`` runs SCRIPT; ``bash`` with no file reads its script from stdin (or a here
    document, which the caller supplies); ``bash FILE`` runs a file: not a wrapper, the shell is
    judged as any program."""
    start, seen, unknown = _scan(args, _SHELL)
    options = {option for option, _ in seen}
    rest = args[start:]
    if "-c" in options:
        if not rest:
            return Unwrapped(transparent=False, problems=("a shell -c with no script",))
        problems = _foreign_grammar(name, rest[0])
        return Unwrapped(script=rest[0], transparent=not unknown, unknown_option=unknown, problems=problems)
    if rest and "-s" not in options:
        return _script_file(rest[0], name)
    problems = () if name in _BASH_GRAMMAR else (f"{name} reads its script with a grammar other than bash's",)
    return Unwrapped(transparent=not unknown, reads_stdin=True, unknown_option=unknown, problems=problems)


# Names of a shell's own input: bash /dev/stdin <<< 'rm -rf x' runs the here-string.
_STDIN_FILES = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})


def _script_file(file: Word, name: str) -> Unwrapped | None:
    """A shell or ``source`` given a script file: its input (a here-document or here-string in
    the line, judged as the script), a file only known at run time (``<(curl …)``, ``"$F"``: never
    judged, so a problem), or a file on disk (not a wrapper: the program is judged as any)."""
    if not file.literal:
        return Unwrapped(
            transparent=False, problems=(f"{name} runs a script only known at run time: {file.text}",)
        )
    if file.text in _STDIN_FILES:
        return Unwrapped(transparent=False, reads_stdin=True)
    return None


def _source(args: tuple[Word, ...]) -> Unwrapped | None:
    """``source FILE`` / ``. FILE`` runs FILE in this shell."""
    start = 1 if args and args[0].literal and args[0].text == "--" else 0
    return _script_file(args[start], "source") if len(args) > start else None


def _coproc(args: tuple[Word, ...]) -> Unwrapped | None:
    """``coproc NAME { …; }`` runs the braces; tree-sitter-bash 0.25 reads NAME as the program and
    the braces as words, so the words after them are judged as a command, and the line is
    never approved by a rule."""
    if len(args) > 2 and args[1].text in ("{", "("):
        return Unwrapped(
            inner=(args[2:],), transparent=False, problems=("coproc NAME { … } is misread by the parser",)
        )
    return _plain(_Options())(args)


def _sudoedit(args: tuple[Word, ...]) -> Unwrapped:
    """sudoedit is ``sudo -e``: a rule on sudo judges it."""
    return Unwrapped(inner=((Word("sudo"), Word("-e"), *args),) if args else (), transparent=False)


def _runs_among(script_options: tuple[str, ...] = ()) -> _Handler:
    """chroot, flock, unshare, nsenter, strace, runuser, parallel ...: a command among the
    arguments, after options we do not read; deny rules look at every later word as a possible
    program, and a ``-c`` option's text is a script."""
    script_handler = _with_script_option(script_options) if script_options else None

    def handle(args: tuple[Word, ...]) -> Unwrapped:
        found = script_handler(args) if script_handler is not None else None
        script = found.script if found is not None else None
        return Unwrapped(script=script, transparent=False, unknown_option=bool(args))

    return handle


_BASH_GRAMMAR = frozenset({"bash", "rbash"})
_POSIX_SHELLS = frozenset({"sh", "dash", "ash"})
# Where a POSIX sh (dash) splits a line into other commands than bash does: dash has no $'...'
# quoting ($'a\'; rm -rf x; #' is one word to bash, three commands to dash), and reads
# "a &>f b" as "a &" then ">f b", which runs b.
_POSIX_DIFFERENCES = ("$'", "&>")


def _foreign_grammar(name: str, script: Word) -> tuple[str, ...]:
    """Why a script for shell ``name`` cannot be judged with a bash grammar, if it cannot.  zsh, ksh
    and fish differ too much (zsh runs code in glob qualifiers: ``*(e:'cmd':)``); a POSIX sh script
    is read as bash unless it holds one of the constructs the two read differently."""
    if name in _BASH_GRAMMAR:
        return ()
    if name in _POSIX_SHELLS and not any(d in script.text for d in _POSIX_DIFFERENCES):
        return ()
    return (f"{name} reads its script with a grammar other than bash's",)


def _with_script_option(names: tuple[str, ...]) -> _Handler:
    """su -c and script -c: the wrapper must be allowed itself, and its -c text is a script.  su
    takes its user before or after -c, so every word is looked at."""

    def handle(args: tuple[Word, ...]) -> Unwrapped:
        script = None
        for i, word in enumerate(args):
            text = word.text
            long_name, eq, value = text.partition("=")
            if word.literal and eq and long_name in names:
                script = Word(value)
            elif word.literal and i + 1 < len(args) and (text in names or _short_cluster_ends(text, "c")):
                script = args[i + 1]
        return Unwrapped(script=script, transparent=False)

    return handle


def _short_cluster_ends(text: str, letter: str) -> bool:
    return text.startswith("-") and not text.startswith("--") and text.endswith(letter)


def _find(args: tuple[Word, ...]) -> Unwrapped:
    """find's -exec, -execdir, -ok and -okdir run a command up to ``;`` or ``+``; ``{}`` is a file
    name we cannot know."""
    inners = []
    i = 0
    while i < len(args):
        if args[i].literal and args[i].text in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(args) and not (args[j].literal and args[j].text in (";", "+")):
                j += 1
            inner = tuple(Word(w.text, literal=False) if w.text == "{}" else w for w in args[i + 1 : j])
            if inner:
                inners.append(inner)
            i = j
        i += 1
    return Unwrapped(inner=tuple(inners), transparent=False)


def _trap(args: tuple[Word, ...]) -> Unwrapped:
    """trap 'handler' SIGNAL: the handler is a script that runs later."""
    if not args or (args[0].literal and args[0].text.startswith("-")):
        return Unwrapped(transparent=False)
    return Unwrapped(script=args[0], transparent=False)


def _alias(args: tuple[Word, ...]) -> Unwrapped:
    """alias name='text': the text runs when a later line uses the name (with expand_aliases)."""
    values = [w for w in args if "=" in w.text]
    if not values:
        return Unwrapped(transparent=False)
    script = Word("\n".join(w.text.partition("=")[2] for w in values), all(w.literal for w in values))
    return Unwrapped(script=script, transparent=False, problems=("defines an alias",))


def _rebinds(what: str, letter: str) -> _Handler:
    """``hash -p PATH NAME`` and ``enable -f LIB NAME``: later uses of NAME run something else, so no
    later command of the line is what its name says (``hash -p /bin/rm git; git -rf x`` is ``rm``)."""

    def handle(args: tuple[Word, ...]) -> Unwrapped:
        if any(not w.literal or (w.text.startswith("-") and letter in w.text[1:]) for w in args):
            return Unwrapped(transparent=False, problems=(f"{what} rebinds a command name",))
        return Unwrapped(transparent=False)

    return handle


def _busybox(args: tuple[Word, ...]) -> Unwrapped:
    return Unwrapped(inner=(args,) if args else (), transparent=bool(args))


_HANDLERS: dict[str, _Handler] = {
    "sudo": _sudo_like(_SUDO),
    "doas": _sudo_like(_DOAS),
    "pkexec": _sudo_like(_PKEXEC),
    "env": _env,
    "command": _plain(_COMMAND),
    "builtin": _plain(_Options()),
    "exec": _plain(_EXEC),
    "nice": _plain(_NICE),
    "ionice": _plain(_IONICE),
    "nohup": _plain(_Options()),
    "setsid": _plain(_SETSID),
    "timeout": _plain(_TIMEOUT, operands=1),
    "time": _plain(_TIME),
    "stdbuf": _plain(_STDBUF),
    "coproc": _coproc,
    "xargs": _xargs,
    "watch": _watch,
    "eval": _eval,
    "su": _with_script_option(("-c", "--command")),
    "script": _with_script_option(("-c", "--command")),
    "find": _find,
    "busybox": _busybox,
    "trap": _trap,
    "alias": _alias,
    "source": _source,
    ".": _source,
    "sudoedit": _sudoedit,
    "chroot": _runs_among(),
    "flock": _runs_among(("-c", "--command")),
    "unshare": _runs_among(),
    "nsenter": _runs_among(),
    "strace": _runs_among(),
    "ltrace": _runs_among(),
    "runuser": _runs_among(("-c", "--command")),
    "parallel": _runs_among(),
    "chrt": _runs_among(),
    "taskset": _runs_among(),
    "prlimit": _runs_among(),
    "hash": _rebinds("hash -p", "p"),
    "enable": _rebinds("enable -f", "f"),
}
