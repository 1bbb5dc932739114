"""Attacks found reviewing the day's merge (interrupts with steering, the CLI's interrupt with a
message, the early start): each test failed before its fix."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

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


def test_interrupt_with_a_message_does_not_interrupt_the_turn_that_carries_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Attack (a race): `orchestrate interrupt TASK MESSAGE` stored the message, then asked for the
    # interrupt in a second transaction.  A turn that ended in between made the message the next
    # turn at once, a worker started it, and the interrupt then stopped THAT turn: the message the
    # person wanted answered after the interrupt was the turn interrupted.  The race is made certain
    # here: the moment the message is stored, the turn ends and a worker takes the follow-up.
    from click.testing import CliRunner

    from orchestrate.cli.tasks import interrupt

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        task_id, run_id = _running(store)
    send = Store.send

    def send_then_race(self: Store, task: int, text: str) -> tuple[object, int, bool]:
        sent = send(self, task, text)
        with Store.open(url) as other:  # the worker, meanwhile
            other.finish_run(run_id, RunEnd(status="done", outcome="success"), "done")
            assert other.claim("w1", Limits(), 30) is not None
        return sent

    monkeypatch.setattr(Store, "send", send_then_race)
    result = CliRunner().invoke(interrupt, [str(task_id), "then do this", "--store", url])
    with Store.open(url) as store:
        task = store.get(task_id)
        runs = store.runs(task_id)
    assert [r.status for r in runs] == ["done", "running"] and runs[1].prompt == "then do this"
    assert not task.interrupt_requested, result.output  # the message's own turn goes on
    assert result.exit_code == 0, result.output


def test_interrupt_with_a_message_when_no_turn_runs_says_the_message_waits(tmp_path: Path) -> None:
    # A queued task has no turn to interrupt: the message was stored, then the command failed with
    # "only a running turn can be interrupted" (exit 1), so a person retried and sent it twice.
    from click.testing import CliRunner

    from orchestrate.cli.tasks import interrupt

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        task = store.submit(TaskSpec(prompt="p", executor="claude-code"))
    result = CliRunner().invoke(interrupt, [str(task.id), "then do this", "--store", url])
    assert result.exit_code == 0, result.output
    assert "no turn running" in result.output
    with Store.open(url) as store:
        assert [m["text"] for m in store.messages(task.id)] == ["then do this"]


# --- the early start ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "refused",
    [
        ["--timeout", "soon"],
        ["--timeout=-1"],
        ["--startup-timeout", "-5"],
        ["--approval-timeout", "x"],
        ["--output", "xml"],
        ["--approvals", "no-such-policy.toml"],  # a typo for the policy meant to hold the agent
        ["--approvals", "."],  # a directory is not a policy file
        ["--record", "."],  # a directory: click refuses it
    ],
)
def test_options_the_full_path_refuses_start_no_agent_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refused: list[str]
) -> None:
    # Attack: Claude Code runs the project's SessionStart hooks (.claude/settings.json) as soon as it
    # starts, before any input (checked with the real CLI: the hook's file appears with stdin open
    # and silent).  The early start spawned the agent for options the full path then refused (a
    # mistyped policy file, a bad timeout), so a run that was refused outright still ran the
    # project's hook commands.  What click and the full path refuse at once is checked before a spawn.
    from orchestrate.cli import early

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(early, "_has_terminal", lambda: True)
    fine = ["run", "-e", "claude-code", "--base-command", "/bin/cat", "--approvals", "deny"]
    assert early.early_spec([*fine, "hi"]) is not None  # the same run with sound options starts early
    assert early.early_spec([*fine, *refused, "hi"]) is None


# --- steering and interrupts through a live agent ---------------------------------------------------


class _Gate:
    """Approves once the test opens the gate: the agent is busy (mid-turn) until then."""

    def __init__(self) -> None:
        import anyio

        self.asked = anyio.Event()
        self.open = anyio.Event()

    async def request_approval(self, request: object) -> object:
        from orchestrate import ApprovalDecision

        self.asked.set()
        await self.open.wait()
        return ApprovalDecision.approve()


@contextlib.asynccontextmanager
async def _steered_acp_turn(tmp_path: Path) -> AsyncIterator[tuple[Any, int, _Gate]]:
    """A steering engine whose ACP agent is mid-turn (its permission held by the gate), with a
    message steered in and handed to the driver, which holds it for the next turn: the engine,
    the task's id and the gate, within a 30 s bound; the engine stops at the end."""
    import sys

    import anyio

    from orchestrate.engine import Engine

    from .helpers import FAKE_ACP

    gate = _Gate()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    options = {"base_command": [sys.executable, str(FAKE_ACP)]}
    async with (
        Engine.open(url, lease=3.0, poll=0.05, approvals=gate, steer=True) as engine,  # type: ignore[arg-type]
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(engine.work)
        task = await engine.submit("permission", "acp", executor_options=options, cwd=tmp_path)
        with anyio.fail_after(30):
            await gate.asked.wait()  # mid-turn
            engine.store.send(task.id, "plain steered")
            while not any(live.steered for live in engine.live.values()):  # noqa: ASYNC110
                await anyio.sleep(0.02)
            assert (await engine.messages(task.id))[0]["delivery"] == "steered"
            yield engine, task.id, gate


@pytest.mark.anyio
async def test_a_message_steered_into_an_acp_turn_survives_an_interrupt_of_that_turn(tmp_path: Path) -> None:
    # Attack: an ACP (or Codex) driver takes a message steered in mid-turn into its own queue (the
    # protocol starts a turn only when the last one ends), and the store marks it steered, delivered
    # to the run.  Interrupting that turn cleared the driver's queue and ended the run: the message
    # was never answered, the store said it went in, and the task rested.  The promise: an interrupt
    # ends the turn, waiting messages are the next turn.
    import anyio

    async with _steered_acp_turn(tmp_path) as (engine, task_id, gate):
        await engine.interrupt(task_id)
        gate.open.set()
        while len(await engine.runs(task_id)) < 2 and (await engine.get(task_id)).status != "done":  # noqa: ASYNC110
            await anyio.sleep(0.05)
        await engine.wait(task_id)
        engine.stop()
        runs = await engine.runs(task_id)
    assert [r.prompt for r in runs][1:] == ["plain steered"]  # the message is the next turn


@pytest.mark.anyio
async def test_a_message_steered_into_an_acp_turn_waits_again_when_the_run_ends_otherwise(
    tmp_path: Path,
) -> None:
    # The same held message, when the run ends another way than an interrupt (here a cancel; a time
    # limit or a crash end it the same way): it was marked steered, delivered to the run, and the
    # driver's queue died with the run.  It must wait again (undelivered), with a notice saying why.
    async with _steered_acp_turn(tmp_path) as (engine, task_id, _):
        await engine.cancel(task_id)
        await engine.wait(task_id)
        engine.stop()
        [message] = await engine.messages(task_id)
        events = engine.store.events(task_id=task_id, limit=10_000)
    assert message["delivery"] is None, message  # waits again: never given to the agent
    why = "the run ended before the agent was sent them"
    assert any(e.kind == "notice" and why in str(e.data) for e in events)
