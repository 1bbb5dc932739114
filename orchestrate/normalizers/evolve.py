"""A copy of a frozen entry model with some fields changed, without validating it again.

``model_copy(update=...)`` costs about ten times a plain dict copy (it deep-walks pydantic's own
bookkeeping), and the normalizers change entries once per line.  The values they put in come from
models that were validated when built, or are plain strings and statuses the normalizer chose: a
copy that skips validation is safe there, and only there.  Everything read from the wire is still
built through the validating constructors.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

__all__ = ["build", "evolve", "evolve_with", "make"]

M = TypeVar("M", bound=BaseModel)

# A model's four slots, set through their descriptors: what ``object.__setattr__(m, name, v)``
# does, without looking the name up each time (these run several times per line: about half of
# a model's cost here).  ``object.__new__``: pydantic models have no ``__new__`` of their own.
_new = object.__new__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def evolve(model: M, /, **changes: Any) -> M:
    """``model`` with ``changes`` applied: what ``model.model_copy(update=changes)`` returns (but
    for ``model_fields_set``, see below)."""
    new = _new(type(model))
    fields = model.__dict__.copy()
    fields.update(changes)
    _set_dict(new, fields)
    # The set of fields given explicitly only matters to ``exclude_unset`` dumps, which nothing
    # here makes; pydantic never changes it in place, so the copy shares the original's.
    _set_fields_set(new, model.__pydantic_fields_set__)
    _set_extra(new, None)
    _set_private(new, None)
    return new


def evolve_with(model: M, changes: dict[str, Any], /) -> M:
    """:func:`evolve` with the changes in a dict the caller already has (not kept): the same
    copy, without packing them into keywords again."""
    new = _new(type(model))
    _set_dict(new, {**model.__dict__, **changes})
    _set_fields_set(new, model.__pydantic_fields_set__)
    _set_extra(new, None)
    _set_private(new, None)
    return new


def build(cls: type[M], /, **fields: Any) -> M:
    """An instance of ``cls`` from values already of the right types, every field given (in the
    order the model declares them).  For the log's own wrappers (entry, patch, metadata) around
    parts that were validated when built."""
    new = _new(cls)
    _set_dict(new, fields)
    # Every field is given, so every instance of ``cls`` built here has the same set: one shared
    # set per class (pydantic never changes a frozen model's set in place).
    given = _ALL_FIELDS.get(cls)
    if given is None or len(given) != len(fields):
        given = _ALL_FIELDS[cls] = set(fields)
    _set_fields_set(new, given)
    _set_extra(new, None)
    _set_private(new, None)
    return new


_ALL_FIELDS: dict[type[BaseModel], set[str]] = {}

# Per model class: (every field's default in declaration order, the fields that have none).
_DEFAULTS: dict[type[BaseModel], tuple[dict[str, Any], frozenset[str]]] = {}


def make(cls: type[M], /, **fields: Any) -> M:
    """``cls(**fields)`` without validation, the defaults filled in: for a model the normalizer
    builds from values whose types it has already made sure of (the ``values`` helpers give a
    ``str``, an ``int``, a ``dict``), once or more per line.  Required fields must be given and
    unknown ones are refused, as the validating constructor would; nothing else is checked."""
    known = _DEFAULTS.get(cls)
    if known is None:
        known = _DEFAULTS[cls] = _defaults(cls)
    defaults, required = known
    values = defaults.copy()
    values.update(fields)
    if len(values) != len(defaults) or not required.issubset(fields):
        raise TypeError(f"{cls.__name__}: unknown or missing fields in {sorted(fields)}")
    new = _new(cls)
    _set_dict(new, values)
    _set_fields_set(new, set(fields))
    _set_extra(new, None)
    _set_private(new, None)
    return new


def _defaults(cls: type[BaseModel]) -> tuple[dict[str, Any], frozenset[str]]:
    defaults: dict[str, Any] = {}
    required = set()
    for name, info in cls.model_fields.items():
        if info.default_factory is not None:
            raise TypeError(f"{cls.__name__}.{name} has a default factory: use the constructor")
        if info.default is PydanticUndefined:
            required.add(name)
        defaults[name] = info.default
    return defaults, frozenset(required)
