"""A shell command line as the simple commands a real bash parser (tree-sitter-bash) finds in it.

Rules judge programs and arguments, never text: ``git status; rm -rf x`` is two commands, and
``echo 'a; rm -rf x'`` is one ``echo``.  Every simple command is found, across ``;``, ``&&``,
``||``, ``|``, ``&``, newlines, subshells, ``{ }``, control structures, command and process
substitution, here-documents, and inside the scripts of ``bash -c``, ``eval`` and the other
wrappers of :mod:`.wrappers`.  What cannot be read for certain (a syntax error, a program that
is only known at run time, a function definition, nesting beyond a bound) is reported as a
problem: such a line is never approved by a rule, and deny rules then also look at its raw text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import tree_sitter
import tree_sitter_bash

from .names import evaluates_name, written_names
from .words import SimpleCommand, Word
from .wrappers import unwrap

__all__ = ["ParsedLine", "parse_line"]

MAX_LINE = 64 * 1024  # longer lines are not parsed: refused by rules, scanned as text
MAX_SCRIPT_DEPTH = 6  # bash -c "bash -c '...'" nesting
MAX_NODE_DEPTH = 100  # tree nesting ((((...))), across nested scripts): bounded, so no recursion error

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())

# Redirection targets that write nothing anyone keeps.
_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})
_DESCRIPTOR = re.compile(r"/dev/fd/[0-9]+")
_NETWORK = re.compile(r"/dev/(tcp|udp)/")  # bash's own sockets: a read there connects out too
_WRITE_OPERATORS = frozenset({">", ">>", "&>", "&>>", ">|", "<>", ">&", "&>|"})
_ANSI_C = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|c.|.)", re.S)
_ANSI_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r"} | {
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_OPERATORS = re.compile(r"\$\(|<\(|>\(|[;&|\n()`<>{}]")
# Bash evaluates a variable's value as code in arithmetic: a value ``a[$(cmd)]`` runs cmd as a
# subscript.  ``$_`` (the previous command's last argument) carries such a value into a line with
# no assignment in it, so any arithmetic that reads anything but numbers is never approved.
_EVALUATED = "a variable's value is evaluated as code (arithmetic, ${x@P}, ${!x}) and may run commands"
_ARITHMETIC_SAFE = frozenset(
    {"number", "binary_expression", "unary_expression", "postfix_expression", "parenthesized_expression"}
    | {"ternary_expression", "test_operator"}
)
_ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_NAME_TESTS = frozenset({"-v", "-R"})  # [[ -v 'a[$(cmd)]' ]] evaluates the subscript


@dataclass(frozen=True)
class ParsedLine:
    """What a command line runs.  ``writes``: files its redirections write (``2>&1`` and
    ``>/dev/null`` are not); ``assignments``: variables it sets for a command or the shell
    (``FOO=1 cmd``, ``export``, ``env FOO=1``, ``for X in``); ``problems``: why it cannot be read
    for certain."""

    text: str
    commands: tuple[SimpleCommand, ...]
    writes: tuple[Word, ...] = ()
    assignments: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def runnable(self) -> tuple[SimpleCommand, ...]:
        """The commands allow rules must each approve: not transparent wrappers, not text guesses."""
        return tuple(c for c in self.commands if not c.transparent and not c.any_start)


def parse_line(text: str) -> ParsedLine:
    """Parse ``text`` as bash.  Never raises: what cannot be read becomes a problem."""
    walker = _Walker()
    walker.script(text, 0, 0)
    return ParsedLine(
        text=text,
        commands=tuple(walker.commands),
        writes=tuple(walker.writes),
        assignments=tuple(dict.fromkeys(walker.assignments)),
        problems=tuple(dict.fromkeys(walker.problems)),
    )


@dataclass
class _Walker:
    commands: list[SimpleCommand] = field(default_factory=list)
    writes: list[Word] = field(default_factory=list)
    assignments: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    misreads: int = 0

    # --- scripts ------------------------------------------------------------------------------

    def script(self, text: str, depth: int, level: int) -> None:
        if depth > MAX_SCRIPT_DEPTH:
            self._unreadable("scripts nested too deep", text)
            return
        if len(text) > MAX_LINE:
            self._unreadable(f"longer than {MAX_LINE} characters", text)
            return
        self._read(text, depth, level)
        if "\\\n" in text:
            # Bash joins lines at a backslash-newline before it splits words, but tree-sitter-bash
            # 0.25 reads r\<newline>m as two words.  Judge the joined reading as well: a command
            # must pass in both readings (outside single quotes and comments they are the same).
            self._read(text.replace("\\\n", ""), depth, level)

    def _read(self, text: str, depth: int, level: int) -> None:
        data = text.encode("utf-8", "surrogatepass")
        root = tree_sitter.Parser(_LANGUAGE).parse(data).root_node
        if root.has_error:
            self._unreadable("the shell parser cannot read it", text)
        misreads = self.misreads
        self.node(root, depth, level)
        if self.misreads > misreads:
            self._unreadable("the shell parser misread a line break or a space", text)

    def _unreadable(self, why: str, text: str) -> None:
        """Record a problem, and keep every way the raw text could be read as commands, so a
        deny rule that matches anywhere in it still denies (fail closed)."""
        self.problems.append(why)
        # Only the first MAX_LINE characters: what lies beyond is unread, and the line unreadable.
        for piece in _OPERATORS.split(text[:MAX_LINE]):
            words = tuple(Word(w) for w in map(_strip_quotes, piece.split()) if w)
            if words:
                self.commands.append(SimpleCommand(words, any_start=True))

    # --- nodes --------------------------------------------------------------------------------

    def node(self, node: tree_sitter.Node, depth: int, level: int) -> None:
        if level > MAX_NODE_DEPTH:
            self._unreadable("nested too deep", _text(node))
            return
        if _EVALUATED not in self.problems and _evaluates_value(node):
            self.problems.append(_EVALUATED)
        match node.type:
            case "ERROR":
                self.problems.append("the shell parser cannot read it")
            case "command":
                self.command(node, (), depth, level)
                return
            case "redirected_statement":
                self.redirected(node, depth, level)
                return
            case "declaration_command" | "unset_command":
                self.declaration(node)
            case "variable_assignment":
                self.assignments.append(_text(node.child_by_field_name("name")))
            case "for_statement" | "select_statement":
                self.assignments.append(_text(node.child_by_field_name("variable")))
            case "function_definition":
                self.problems.append(f"defines a shell function: {_text(node.child_by_field_name('name'))}")
            case "expansion" if any(c.type in ("=", ":=") for c in node.children):
                self.assignments.append(_text(node))
            case "file_redirect":
                self.redirect(node)
            case "command_substitution" if node.children and node.children[0].type == "`":
                self.backticks(node, depth, level)
            case "word" if _has_bare_break(_text(node)):
                # Bash ends a word at an unquoted space or newline; tree-sitter-bash 0.25 sometimes
                # does not ("a\\n\\rm" became one word), so the words it gives are not bash's.
                self.misreads += 1
        if node.is_missing:
            self.problems.append("the shell parser cannot read it")
        for child in node.children:
            self.node(child, depth, level + 1)

    def backticks(self, node: tree_sitter.Node, depth: int, level: int) -> None:
        """Inside backticks bash removes the backslash before ``$``, `````` and ``\\`` (and ``"``
        inside double quotes) before it parses the text, so ``echo `echo \\`sudo x\\``` runs
        ``sudo x``; tree-sitter-bash reads the escaped backticks as words.  Judge the unescaped
        text as a script too (its commands must pass in both readings)."""
        inner = _text(node)[1:-1]
        in_string = node.parent is not None and node.parent.type == "string"
        unescaped = re.sub(r'\\([$`\\"])' if in_string else r"\\([$`\\])", r"\1", inner)
        if unescaped != inner:
            self.script(unescaped, depth + 1, level + 1)

    def redirected(self, node: tree_sitter.Node, depth: int, level: int) -> None:
        body = node.child_by_field_name("body")
        redirects = [c for c in node.children if c != body]
        if body is not None and body.type == "command":
            self.command(body, tuple(redirects), depth, level + 1)
        elif body is not None:
            self.node(body, depth, level + 1)
        for child in redirects:
            self.node(child, depth, level + 1)

    def redirect(self, node: tree_sitter.Node) -> None:
        operator = next((c.type for c in node.children if not c.is_named), "")
        target = node.child_by_field_name("destination")
        if target is not None and _NETWORK.match(_text(target).strip("'\"")):
            self.writes.append(_word(target))  # bash opens a connection, whichever way: never harmless
            return
        if operator not in _WRITE_OPERATORS or target is None:
            return
        if target.type == "process_substitution" or (operator in (">&", "<&") and target.type == "number"):
            return  # a pipe into a command (judged itself), or a copy of a descriptor
        word = _word(target)
        # Only the exact names: /dev/fd/../../../etc/passwd is /etc/passwd to bash.
        if not (word.literal and (word.text in _HARMLESS_TARGETS or _DESCRIPTOR.fullmatch(word.text))):
            self.writes.append(word)

    def declaration(self, node: tree_sitter.Node) -> None:
        """export/declare/local/readonly/typeset/unset: a command that sets or unsets variables."""
        words = []
        for child in node.children:
            text = _text(child)
            # declare -i makes later assignments arithmetic, -n makes a name reference; a quoted
            # 'a[$(cmd)]=1' has its subscript evaluated: code run at run time.
            evaluated = (child.type == "word" and text.startswith("-") and ("i" in text or "n" in text)) or (
                child.type != "variable_assignment" and evaluates_name(text.partition("=")[0])
            )
            if evaluated and _EVALUATED not in self.problems:
                self.problems.append(_EVALUATED)
            if child.type == "variable_assignment":
                self.assignments.append(_text(child.child_by_field_name("name")))
                words.append(Word(_text(child), literal=False))
            elif child.type == "variable_name":
                self.assignments.append(_text(child))
                words.append(Word(_text(child)))
            elif child.type != "comment":
                words.append(_word(child) if child.is_named else Word(_text(child)))
        self.commands.append(SimpleCommand(tuple(words)))

    # --- simple commands ----------------------------------------------------------------------

    def command(
        self, node: tree_sitter.Node, redirects: tuple[tree_sitter.Node, ...], depth: int, level: int
    ) -> None:
        words: list[Word] = []
        stdin_script: Word | None = None
        for child in node.children:
            if child.type == "variable_assignment":
                self.assignments.append(_text(child.child_by_field_name("name")))
            elif child.type in ("herestring_redirect", "file_redirect", "heredoc_redirect"):
                redirects = (*redirects, child)
            elif child.type == "command_name" or (child.is_named and child.type != "comment"):
                words.append(_word(child.named_children[0] if child.type == "command_name" else child))
            # Substitutions inside the words run too: look inside every part.
            self.node(child, depth, level + 1)
        for redirect in redirects:
            stdin_script = _stdin_script(redirect) or stdin_script
        if words:
            self.run(tuple(words), stdin_script, depth, level)

    def run(self, words: tuple[Word, ...], stdin_script: Word | None, depth: int, level: int) -> None:
        """Record ``words`` as a command, and what it runs in turn when it is a wrapper."""
        program = words[0]
        if not program.literal:
            self.problems.append(f"the program is only known at run time: {program.text}")
        written = written_names(words)
        self.assignments.extend(written.names)
        if written.evaluated is not None and _EVALUATED not in self.problems:
            self.problems.append(_EVALUATED)
        wrapped = unwrap(words)
        self.commands.append(SimpleCommand(words, transparent=wrapped is not None and wrapped.transparent))
        if wrapped is None:
            return
        self.assignments.extend(wrapped.assignments)
        self.problems.extend(wrapped.problems)
        if wrapped.unknown_option:
            # Where the wrapped command starts is a guess: any later word may be its program.
            self.commands.append(SimpleCommand(words[1:], any_start=True))
        for inner in wrapped.inner:
            self.run(inner, None, depth, level + 1)
        script = wrapped.script
        if wrapped.reads_stdin:
            script = stdin_script
            if script is None:
                self.problems.append(f"{program.text} runs a script from its input, which is not in the line")
        if script is None:
            return
        if not script.literal:
            self.problems.append(f"{program.text} runs a script only known at run time: {script.text}")
            self._unreadable("a script only known at run time", script.text)
            return
        self.script(script.text, depth + 1, level + 1)


def _evaluates_value(node: tree_sitter.Node) -> bool:
    """Whether bash evaluates some value as code at ``node``: arithmetic (``$((x))``, ``((x))``,
    ``$[x]``, ``for ((..))``, a subscript, a substring offset, ``[[ x -eq y ]]``) on anything but
    numbers, ``[[ -v name ]]``, prompt expansion ``${x@P}`` and indirect expansion ``${!x}``."""
    kind = node.type
    children = node.children
    if kind in ("arithmetic_expansion", "c_style_for_statement"):
        return _reads_more_than_numbers(node)
    if kind == "compound_statement" and children and children[0].type == "((":
        return _reads_more_than_numbers(node)
    if kind == "subscript":
        index = [c for c in children[2:] if c.type != "]"]
        return not all(c.type == "number" or _text(c) in ("@", "*") for c in index)
    if kind == "unary_expression" or kind == "binary_expression":
        operator = next((_text(c) for c in children if c.type == "test_operator"), None)
        if operator in _NAME_TESTS:
            return True
        if operator in _ARITHMETIC_TESTS:
            return any(c.is_named and c.type not in _ARITHMETIC_SAFE for c in children)
        return False
    if kind == "expansion":
        types = [c.type for c in children]
        if "@" in types and any(_text(c) == "P" for c in children[types.index("@") + 1 :]):
            return True
        if len(types) > 2 and types[1] == "!" and "*" not in types and types[2] != "subscript":
            return True  # ${!x}: the value of the variable x names (${!x*}, ${!a[@]} list names)
        if ":" in types:  # ${x:offset:length}, both arithmetic
            return _reads_more_than_numbers(node, after=types.index(":"))
    return False


def _reads_more_than_numbers(node: tree_sitter.Node, after: int = 0) -> bool:
    """Whether arithmetic at ``node`` (from child ``after`` on) refers to anything but numbers.
    Iterative: the tree may be deep."""
    stack = [c for c in node.children[after:] if c.is_named]
    while stack:
        child = stack.pop()
        if child.type not in _ARITHMETIC_SAFE:
            return True
        stack.extend(c for c in child.children if c.is_named)
    return False


def _stdin_script(redirect: tree_sitter.Node) -> Word | None:
    """The text a here-document or here-string feeds to a command's input."""
    if redirect.type == "herestring_redirect":
        return _word(redirect.named_children[-1]) if redirect.named_children else None
    if redirect.type == "heredoc_redirect":
        body = next((c for c in redirect.children if c.type == "heredoc_body"), None)
        if body is None:
            return Word("", literal=True)
        dynamic = any(c.type not in ("heredoc_content",) for c in body.named_children)
        return Word(_text(body), literal=not dynamic)
    return None


# --- words ------------------------------------------------------------------------------------


def _word(node: tree_sitter.Node) -> Word:
    """The value of a word node after quote removal, or its text if the shell expands it."""
    value = _literal(node)
    return Word(value) if value is not None else Word(_text(node), literal=False)


def _literal(node: tree_sitter.Node) -> str | None:
    match node.type:
        case "word" | "number":
            return _unquoted(_text(node))
        case "raw_string":
            return _text(node)[1:-1]
        case "string" | "translated_string":
            parts = []
            for child in node.named_children:
                if child.type != "string_content":
                    return None
                parts.append(re.sub(r"\\([\\$`\"\n])", lambda m: "" if m[1] == "\n" else m[1], _text(child)))
            return "".join(parts)
        case "ansi_c_string":
            return _ansi_c(_text(node)[2:-1])
        case "concatenation":
            values = [_literal(c) for c in node.named_children]
            return None if any(v is None for v in values) else "".join(v for v in values if v is not None)
    return None


def _unquoted(text: str) -> str | None:
    """An unquoted word: backslashes removed; None if the shell would expand it (a glob, a brace
    expansion), since its value is then not what is written.  A leading ``~`` (a home directory)
    is kept as written."""
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            if i + 1 < len(text) and text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        if char in "*?[" or (char == "{" and text != "{}"):
            return None
        out.append(char)
        i += 1
    return "".join(out)


def _has_bare_break(text: str) -> bool:
    """An unescaped space, tab or newline inside an unquoted word: bash would have split there."""
    escaped = False
    for char in text:
        if not escaped and char in " \t\n":
            return True
        escaped = not escaped and char == "\\"
    return False


def _ansi_c(body: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match[1]
        if code in _ANSI_SIMPLE:
            return _ANSI_SIMPLE[code]
        if code[0] in "xuU":
            return chr(min(int(code[1:], 16), 0x10FFFF))
        if code[0] == "c":
            return chr(ord(code[1]) & 0x1F)
        if code[0] in "01234567":
            return chr(int(code, 8) & 0xFF)
        return "\\" + code

    return _ANSI_C.sub(one, body)


def _strip_quotes(word: str) -> str:
    return re.sub(r"""["'\\]""", "", word.removeprefix("$'").removeprefix('$"'))


def _text(node: tree_sitter.Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", "surrogatepass")
