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

__all__ = ["build", "evolve"]

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
