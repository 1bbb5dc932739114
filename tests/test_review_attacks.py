"""Attacks found reviewing the day's merge (interrupts with steering, the CLI's interrupt with a
message): each test failed before its fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrate.store import Limits, RunEnd, Store, TaskSpec


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as s:
        yield s


def _running(store: Store) -> tuple[int, int]:
    task = store.submit(TaskSpec(prompt="p", executor="claude-code"))
    claimed = store.claim("w1", Limits(), 30)
    assert claimed is not None
    return task.id, claimed[1].id


def test_a_message_is_not_steered_into_a_turn_being_interrupted(store: Store) -> None:
    # Attack: `orchestrate interrupt TASK MESSAGE` (or interrupt, then send) promises the message is
    # the NEXT turn; a --steer worker polling between the two took it into the turn it was about to
    # interrupt, so the message died with that turn (delivered, "steered", never answered).
    task_id, run_id = _running(store)
    store.interrupt(task_id)
    _, message_id, starts = store.send(task_id, "then do this")
    assert not starts
    assert store.steer(run_id) == []  # the turn is being interrupted: the message waits for the next
    store.finish_run(run_id, RunEnd(status="done", outcome="interrupted"), "done")
    nxt = store.claim("w1", Limits(), 30)
    assert nxt is not None and nxt[1].prompt == "then do this"
    assert [m["delivery"] for m in store.messages(task_id)] == ["next_turn"]
    assert message_id
