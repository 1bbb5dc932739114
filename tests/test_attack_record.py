"""Attacks on process/record.py's Record, which replaced frozen dataclasses on the early path:
every record there must still be frozen, compare and hash by value, and survive pickle and copy."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pytest

from orchestrate.cli.early import _Options, _Task
from orchestrate.executors.base import Availability, Capabilities
from orchestrate.process.record import Record
from orchestrate.process.spec import ProcessSpec

RECORDS: list[tuple[Record, dict[str, Any]]] = [
    (ProcessSpec(argv=("a", "b"), cwd=Path("/tmp"), env=(("K", "V"),)), {"cwd": Path("/")}),  # type: ignore[arg-type]
    (Capabilities("acp", session_resume=True, mcp=True), {"fork": True}),
    (Availability("claude-code", True, version="1.0", path="/bin/claude"), {"installed": False}),
    (_Options(model="m", sandbox="s", stable_seconds=1.5), {"model": "n"}),
    (_Task("hi", Path("/tmp"), model="m", fork=True), {"prompt": "bye"}),
]


@pytest.mark.parametrize(("record", "change"), RECORDS, ids=lambda r: type(r).__name__)
def test_frozen_by_value_and_copyable(record: Record, change: dict[str, Any]) -> None:
    name = type(record).__slots__[0]
    with pytest.raises(AttributeError):
        setattr(record, name, "changed")
    with pytest.raises(AttributeError):
        delattr(record, name)
    with pytest.raises(AttributeError):
        record.not_a_field = 1  # type: ignore[attr-defined]  # slots: no new attribute either
    for same in (
        pickle.loads(pickle.dumps(record)),
        copy.copy(record),
        copy.deepcopy(record),
        record.replace(),
    ):
        assert same == record
        assert same is not record
        assert type(same) is type(record)
        assert repr(same) == repr(record)
    other = record.replace(**change)
    assert other != record
    assert getattr(record, next(iter(change))) != next(iter(change.values()))  # the original untouched
    with pytest.raises(TypeError):
        record.replace(no_such_field=1)
    assert record != tuple(getattr(record, n) for n in type(record).__slots__)  # another class: unequal


def test_hash_follows_equality() -> None:
    a = Capabilities("acp", approvals=True)
    b = Capabilities("acp", approvals=True)
    assert a == b and hash(a) == hash(b)
    assert len({a, b, Capabilities("acp")}) == 2
    with pytest.raises(TypeError):  # a list field: unhashable, as a frozen dataclass's would be
        hash(ProcessSpec(argv=["x"], cwd=Path("/"), env={}))


def test_a_mutable_default_is_not_shared() -> None:
    first, second = _Options(), _Options()
    first.extra_args.append("--x")
    first.env["A"] = "1"
    assert second.extra_args == [] and second.env == {}
    assert _Task("p", Path("/")).env is not _Task("p", Path("/")).env
