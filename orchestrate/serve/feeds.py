"""Shared feeds: one poller per watched task (and one for the whole board) reads the store and keeps
its newest frames in a bounded ring; every subscriber reads from that ring, or from the store itself
while it is behind the ring.

So a subscriber costs a cursor, not a queue: a slow one simply falls behind and later reads what it
missed from the store (the durable log), and the server's memory stays the ring's bound whatever the
number or speed of the clients.  Frames are serialized once, in the poller, and shared.

Polling, not a signal from the writer: the runs may be written by workers in other processes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
import anyio.abc

from ..store import StoreError

__all__ = ["Feed", "FeedHub", "Item", "follow"]

_log = logging.getLogger("orchestrate.serve")

K = TypeVar("K", int, tuple[float, int])
PAGE = 200
"""Events read from the store at a time (by a poller, or by a subscriber behind the ring): small
pages keep the memory a burst of big events costs small."""


@dataclass(frozen=True, slots=True)
class Item(Generic[K]):
    """One event as a ready-to-send SSE frame; ``key`` orders them (a task's seq, or a change number)."""

    key: K
    kind: str
    frame: bytes


Fetch = Callable[[K, int], Awaitable[list[Item[K]]]]
"""Read items after a key from the store, at most N of them, in key order."""


class Feed(Generic[K]):
    """The ring of one topic, filled by :meth:`run` while it has users."""

    def __init__(
        self, fetch: Fetch[K], start: K, *, poll: float, max_items: int = 4096, max_bytes: int = 8 << 20
    ) -> None:
        self.fetch: Fetch[K] = fetch
        self.poll = poll
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.floor: K = start
        """Items after this key are all in the ring (older ones were dropped or never read)."""
        self.cursor: K = start
        """The newest key read."""
        self._items: list[Item[K]] = []
        self._start = 0
        self._bytes = 0
        self._changed = anyio.Event()
        self.users = 0

    # --- for subscribers ------------------------------------------------------------------------

    def after(self, key: K, limit: int) -> list[Item[K]] | None:
        """Up to ``limit`` items after ``key`` from the ring; None if the ring does not reach back
        to ``key`` (read the store instead)."""
        if key < self.floor:
            return None
        lo, hi = self._start, len(self._items)
        while lo < hi:  # the first item with a key above ``key``
            mid = (lo + hi) // 2
            if self._items[mid].key <= key:
                lo = mid + 1
            else:
                hi = mid
        return self._items[lo : lo + limit]

    async def wait_past(self, key: K, seconds: float) -> bool:
        """Wait until an item after ``key`` was read (True) or ``seconds`` passed (False)."""
        changed = self._changed
        if self.cursor > key:
            return True
        with anyio.move_on_after(seconds):
            await changed.wait()
        return self.cursor > key

    # --- the poller -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Poll the store while anyone listens."""
        while self.users > 0:
            try:
                items = await self.fetch(self.cursor, PAGE)
            except StoreError as exc:  # busy or failing: subscribers wait, nothing is lost
                _log.warning("feed poll failed: %s", exc)
                items = []
            if items:
                self._add(items)
                if len(items) == PAGE:
                    continue  # more is waiting
            await anyio.sleep(self.poll)

    def _add(self, items: list[Item[K]]) -> None:
        self._items.extend(items)
        self._bytes += sum(len(i.frame) for i in items)
        self.cursor = items[-1].key
        while len(self._items) - self._start > self.max_items or (
            self._bytes > self.max_bytes and len(self._items) - self._start > 1
        ):
            dropped = self._items[self._start]
            self._start += 1
            self._bytes -= len(dropped.frame)
            self.floor = dropped.key
        if self._start > len(self._items) // 2:
            del self._items[: self._start]
            self._start = 0
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    @property
    def held(self) -> tuple[int, int]:
        """(items, bytes) in the ring now."""
        return len(self._items) - self._start, self._bytes


class FeedHub(Generic[K]):
    """The feeds by topic: made on the first subscriber, dropped after the last one leaves."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self.tg = tg
        self.feeds: dict[object, Feed[K]] = {}

    @contextlib.contextmanager
    def use(self, topic: object, make: Callable[[], Feed[K]]) -> Iterator[Feed[K]]:
        feed = self.feeds.get(topic)
        if feed is None:
            feed = self.feeds[topic] = make()
            feed.users = 1
            self.tg.start_soon(self._run, topic, feed)
        else:
            feed.users += 1
        try:
            yield feed
        finally:
            feed.users -= 1

    async def _run(self, topic: object, feed: Feed[K]) -> None:
        try:
            await feed.run()
        finally:
            if self.feeds.get(topic) is feed:
                del self.feeds[topic]

    def held(self) -> tuple[int, int]:
        """(items, bytes) held by every ring."""
        counts = [f.held for f in self.feeds.values()]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)


async def follow(
    feed: Feed[K],
    after: K,
    *,
    accept: Callable[[Item[K]], bool],
    heartbeat: float = 15.0,
    batch: int = PAGE,
    max_chunk: int = 64 << 10,
) -> AsyncIterator[bytes]:
    """The frames after ``after`` that ``accept`` takes, joined into chunks of at most about
    ``max_chunk`` bytes, for as long as the caller reads; a comment line every ``heartbeat`` seconds
    of quiet (so a dead connection is found, and proxies keep it open)."""
    cursor = after
    while True:
        items = feed.after(cursor, batch)
        if items is None:
            items = await feed.fetch(cursor, batch)  # behind the ring: from the store
            if not items:  # not stored yet, or the store is busy: the ring catches up meanwhile
                await anyio.sleep(feed.poll)
                continue
        if items:
            cursor = items[-1].key
            chunk: list[bytes] = []
            size = 0
            for item in items:
                if not accept(item):
                    continue
                chunk.append(item.frame)
                size += len(item.frame)
                if size >= max_chunk:
                    yield b"".join(chunk)
                    chunk, size = [], 0
            if chunk:
                yield b"".join(chunk)
            continue
        if not await feed.wait_past(cursor, heartbeat):
            yield b": keep-alive\n\n"
