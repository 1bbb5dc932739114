"""Words and simple commands: what a shell line is made of once a parser has read it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SimpleCommand", "Word"]


@dataclass(frozen=True)
class Word:
    """One shell word.  ``literal`` words hold their value after quote removal (``"rm"``, ``\\rm`` and
    ``$'\\x72m'`` are all ``rm``); a word the shell expands at run time (``$X``, ``$(...)``, a glob,
    a brace expansion) is not literal and holds its source text."""

    text: str
    literal: bool = True

    def could_be_flag(self) -> bool:
        """Whether the shell could turn this word into something starting with ``-``."""
        if self.literal:
            return self.text.startswith("-")
        head = self.text.lstrip("\"'")
        return not head or not (head[0].isalnum() or head[0] in "/._~+=,:@%")


@dataclass(frozen=True)
class SimpleCommand:
    """A program and its arguments, as the shell would run it.

    ``transparent``: a wrapper (``nice``, ``timeout``, ``bash -c`` ...) that only changes how its inner
    command runs; allow rules judge the inner command alone, deny rules judge both.
    ``any_start``: words recovered from text we could not parse (or after a wrapper option we do
    not know), where any word may begin a command; only deny rules look at these."""

    words: tuple[Word, ...]
    transparent: bool = False
    any_start: bool = False

    @property
    def program(self) -> Word | None:
        return self.words[0] if self.words else None

    def __str__(self) -> str:
        return " ".join(w.text for w in self.words)
