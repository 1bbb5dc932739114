"""Small immutable records without :mod:`dataclasses`.

``orchestrate run`` spawns its agent before the rest of the CLI loads (cli/early.py), and the
records on that path (the process spec, an executor's capabilities, the early start's stand-ins)
were frozen dataclasses: importing :mod:`dataclasses` pulls in :mod:`inspect` (and with it ``ast``,
``dis``, ``tokenize``), about 12-17 ms of CPU on every start before the agent could be spawned, and
each class decorated costs another millisecond.  A :class:`Record` behaves as a frozen dataclass
does where this code relies on it: fields in ``__slots__`` (in order), set once by ``__init__``,
equality and hash over the fields of the same class, a ``repr`` naming them, and :meth:`replace`.
"""

from __future__ import annotations

# Types only (mypy takes any ``TYPE_CHECKING`` as true): typing (with re) is ~3 ms of every start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Self

__all__ = ["Record"]


class Record:
    """A frozen record: a subclass lists its fields in ``__slots__`` and sets each in ``__init__``."""

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> None:
        # Set once (by __init__), never again: frozen, as the dataclasses these replace were.
        if hasattr(self, name):
            raise AttributeError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")

    def _fields(self) -> tuple[str, ...]:
        # The constructor's arguments, read back by name: the slots, unless a subclass stores one
        # in another form (ProcessSpec keeps its cwd as a str slot and reads it as a Path).
        return type(self).__slots__  # a tuple in every subclass

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields())

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Record)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())  # a list or dict field makes it unhashable, as a dataclass's

    def __repr__(self) -> str:
        inside = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields())
        return f"{type(self).__qualname__}({inside})"

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (a name that is not a field is a TypeError, from ``__init__``)."""
        values = {name: getattr(self, name) for name in self._fields()}
        values.update(changes)
        return type(self)(**values)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled and copied by keyword, through __init__ (which may check or convert).
        return _rebuild, (type(self), dict(zip(self._fields(), self._values(), strict=True)))


def _rebuild(cls: type[Record], values: dict[str, Any]) -> Record:
    return cls(**values)
