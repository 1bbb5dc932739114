"""Text that grows by deltas, in time linear in its length.

Appending to a Python string copies it: a streamed answer of n deltas rebuilt on each one costs
O(n^2).  A :class:`TextBuffer` keeps the pieces and joins them only when the whole text is read
(once per batch of patches), and answers the questions normalizers ask of the text so far (is this
piece a copy of it, does it end with that) without building it.
"""

from __future__ import annotations

__all__ = ["TextBuffer"]


class TextBuffer:
    __slots__ = ("_length", "_parts")

    def __init__(self, text: str = "") -> None:
        self._parts = [text] if text else []
        self._length = len(text)

    def __len__(self) -> int:
        return self._length

    def append(self, piece: str) -> None:
        if piece:
            self._parts.append(piece)
            self._length += len(piece)

    def set(self, text: str) -> None:
        self._parts = [text] if text else []
        self._length = len(text)

    def text(self) -> str:
        """The whole text (joined once, then kept as one piece)."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def equals(self, other: str) -> bool:
        return len(other) == self._length and other == self.text()

    def is_prefix_of(self, other: str) -> bool:
        # Only joined when ``other`` is at least as long: the cost is paid by the input.
        return len(other) >= self._length and other.startswith(self.text())

    def endswith(self, suffix: str) -> bool:
        return len(suffix) <= self._length and self.tail(len(suffix)) == suffix

    def tail(self, n: int) -> str:
        """The last ``n`` characters, from the last pieces only."""
        if n <= 0:
            return ""
        taken: list[str] = []
        need = n
        for part in reversed(self._parts):
            if len(part) >= need:
                taken.append(part[len(part) - need :])
                break
            taken.append(part)
            need -= len(part)
        return "".join(reversed(taken))
