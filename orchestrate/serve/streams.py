"""Server-Sent Events: the frames of a task's stream and of the board's, and the response that sends
them to one client with a bound on how long it may keep us waiting.

A task's stream: one message per stored event, ``id`` its ``seq`` (the task's sequence number),
``event`` its kind (``patch``, ``state``, ``notice``; ``raw`` when asked for), and ``data``::

    {"seq": 12, "runId": 3, "runSeq": 9, "ts": 1732400000.5, "data": {...}}

where ``data`` of a ``patch`` is exactly a line of ``orchestrate run --output jsonl``.  Reconnect with
``Last-Event-ID`` (browsers' EventSource does it by itself) or ``?after=SEQ``: the stream goes on after
that event, nothing missed, nothing twice.

The board's stream: one ``task`` message per task each time it changes (the task as ``GET
/api/tasks/{id}`` has it), ``id`` the change's number in the store-wide change sequence (store/clock.py:
numbers become visible in order, whatever the number of writers and machines).  A client that resumes
gets the latest state of every task that changed meanwhile, each once (changes in between are
coalesced: a board needs where each task is, not every step it took), and misses none.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import orjson

from ..store import Event, Store, TaskRecord
from .feeds import Item

__all__ = [
    "EventStream",
    "board_fetcher",
    "board_item",
    "changed_tasks",
    "newest_task_key",
    "parse_board_id",
    "task_fetcher",
    "task_item",
]

_log = logging.getLogger("orchestrate.serve")
DROPPED = "orchestrate: stream dropped"


def _frame(event_id: str, kind: str, data: bytes) -> bytes:
    return b"id: " + event_id.encode() + b"\nevent: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def task_item(event: Event) -> Item[int]:
    body = {"seq": event.seq, "runId": event.run_id, "runSeq": event.run_seq, "ts": event.ts}
    # orjson never writes a newline, so one data line holds the whole message.
    data = orjson.dumps(body | {"data": event.data})
    return Item(event.seq, event.kind, _frame(str(event.seq), event.kind, data))


def board_item(change: int, task: TaskRecord) -> Item[int]:
    return Item(change, "task", _frame(str(change), "task", task_json(task)))


def task_json(task: TaskRecord) -> bytes:
    return orjson.dumps(task.model_dump(mode="json"))


def parse_board_id(value: str) -> int | None:
    """A board event id as the change number to resume after; None if it is not one.  An id of the
    form the board used before change numbers (``UPDATED_AT:TASK_ID``) resumes from the start: every
    task's state once more, rather than a gap."""
    if value.isascii() and value.isdigit():
        return int(value)
    stamp, sep, task = value.partition(":")
    try:
        float(stamp), int(task)
    except ValueError:
        return None
    return 0 if sep else None


def task_fetcher(store: Store, task_id: int) -> Callable[[int, int], Awaitable[list[Item[int]]]]:
    async def fetch(after: int, limit: int) -> list[Item[int]]:
        events = await anyio.to_thread.run_sync(
            lambda: store.events(task_id=task_id, after=after, limit=limit)
        )
        return [task_item(e) for e in events]

    return fetch


def changed_tasks(store: Store, after: int, limit: int) -> list[tuple[int, TaskRecord]]:
    """Tasks changed after change number ``after``, with their numbers, in order (read-only; a
    worker thread's)."""
    return store.changes(after, limit)


def newest_task_key(store: Store) -> int:
    """The board's key now: what changes after it is news."""
    return store.last_change()


def board_fetcher(store: Store) -> Callable[[int, int], Awaitable[list[Item[int]]]]:
    async def fetch(after: int, limit: int) -> list[Item[int]]:
        found = await anyio.to_thread.run_sync(lambda: changed_tasks(store, after, limit))
        return [board_item(n, t) for n, t in found]

    return fetch


class EventStream:
    """An ASGI response sending ``frames`` as ``text/event-stream`` until the client leaves.  A client
    that takes no data for ``send_timeout`` seconds is dropped (its connection closed): it reconnects
    with ``Last-Event-ID`` and reads the rest from the store, so no one's slowness holds memory here."""

    def __init__(self, frames: AsyncIterator[bytes], *, send_timeout: float, retry_ms: int = 1000) -> None:
        self.frames = frames
        self.send_timeout = send_timeout
        self.retry_ms = retry_ms
        self.dropped = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),  # a proxy (nginx) must not hold the stream back
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        async with anyio.create_task_group() as tg:

            async def gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(gone)
            first = f"retry: {self.retry_ms}\n\n".encode()
            try:
                if await self._send(send, first):
                    async for chunk in self.frames:
                        if not await self._send(send, chunk):
                            break
            finally:
                with anyio.CancelScope(shield=True):
                    await self.frames.aclose()  # type: ignore[attr-defined]
            if not self.dropped:
                with anyio.move_on_after(1):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()
        if self.dropped:
            _log.warning("%s: %s took no data for %gs", DROPPED, scope.get("path"), self.send_timeout)

    async def _send(self, send: Any, chunk: bytes) -> bool:
        with anyio.move_on_after(self.send_timeout):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            return True
        self.dropped = True
        return False
