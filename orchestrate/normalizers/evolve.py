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

__all__ = ["build", "evolve", "make"]

M = TypeVar("M", bound=BaseModel)
_set = object.__setattr__


def evolve(model: M, /, **changes: Any) -> M:
    """``model`` with ``changes`` applied: what ``model.model_copy(update=changes)`` returns (but
    for ``model_fields_set``, see below)."""
    cls = type(model)
    new = cls.__new__(cls)
    fields = model.__dict__.copy()
    fields.update(changes)
    _set(new, "__dict__", fields)
    # The set of fields given explicitly only matters to ``exclude_unset`` dumps, which nothing
    # here makes; pydantic never changes it in place, so the copy shares the original's.
    _set(new, "__pydantic_fields_set__", model.__pydantic_fields_set__)
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new


def build(cls: type[M], /, **fields: Any) -> M:
    """An instance of ``cls`` from values already of the right types, every field given (in the
    order the model declares them).  For the log's own wrappers (entry, patch, metadata) around
    parts that were validated when built."""
    new = cls.__new__(cls)
    _set(new, "__dict__", fields)
    _set(new, "__pydantic_fields_set__", set(fields))
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new


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
    new = cls.__new__(cls)
    _set(new, "__dict__", values)
    _set(new, "__pydantic_fields_set__", set(fields))
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
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
