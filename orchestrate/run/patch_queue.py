"""The patches a run has made and its caller has not read yet, coalesced per entry.

A slow caller must not cost memory per text delta: while an entry's patch waits, a newer one for
the same entry takes its place (the entry is the latest state, so nothing is lost), so what waits is
at most one patch per entry.  Order is the order entries were first touched since the caller last
read them; a waiting ``add`` stays an ``add`` with the newer entry, so every caller still sees an
entry added before it is replaced, and adds in index order.

Coalescing cannot fold new entries: a caller slower than the agent would still hold one patch per
entry it has not read.  Given a ``limit`` (:meth:`PatchQueue.bound`: a streaming run's, handle.py),
the producer awaits :meth:`PatchQueue.room` after each chunk it handles, so while ``limit`` patches
wait unread it reads no more of the agent's output (whose pipe then fills, and the agent waits):
what waits stays about ``limit`` patches and one chunk's worth.  A reader that takes nothing for
``stall`` seconds has stopped reading (it broke out of its loop and waits for the end): the queue
stops holding the producer back for good, rather than hang the run.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:  # the queue is made before the entry models are loaded (see handle.py)
    from ..entries import EntryPatch

__all__ = ["PatchQueue"]


class PatchQueue:
    def __init__(self) -> None:
        # An OrderedDict, not a dict: taking from the front of a plain dict that only shrinks
        # rescans the deleted slots each time, which is quadratic over a long run.
        self._waiting: OrderedDict[int, EntryPatch] = OrderedDict()
        self._closed = False
        self._changed = anyio.Event()
        self._asleep = False  # a reader waits on _changed: the next put must wake it
        self._limit: int | None = None  # see bound()
        self._room: anyio.Event | None = None  # the producer waits on it for the reader to take

    def __len__(self) -> int:
        return len(self._waiting)

    def put(self, patch: EntryPatch) -> None:
        """Queue ``patch``, or fold it into the one already waiting for its entry."""
        waiting = self._waiting.get(patch.index)
        if waiting is not None and waiting.op != patch.op:
            patch = type(patch).model_construct(op=waiting.op, index=patch.index, entry=patch.entry)
        self._waiting[patch.index] = patch  # an existing key keeps its place
        if self._asleep:  # (not an Event.set per patch: thousands a second while nobody waits)
            self._asleep = False
            self._changed.set()

    def close(self) -> None:
        """No more patches will come: a reader gets what waits, then the end."""
        self._closed = True
        self._changed.set()
        self.release()

    def bound(self, limit: int) -> None:
        """From now on the producer's :meth:`room` waits while ``limit`` patches wait unread."""
        self._limit = limit

    def release(self) -> None:
        """The producer no longer waits for room (the reader will not read at its pace)."""
        self._limit = None
        if self._room is not None:
            self._room.set()

    async def room(self, stall: float) -> None:
        """Wait while ``limit`` patches or more wait unread; ``stall``: see the module's text."""
        while self._limit is not None and len(self._waiting) >= self._limit:
            room = self._room = anyio.Event()
            try:
                with anyio.move_on_after(stall):
                    await room.wait()
            finally:
                self._room = None
            if not room.is_set():
                self.release()

    def discard(self) -> None:
        """Close and drop what waits (nobody will read it)."""
        self.close()
        self._waiting.clear()

    async def get(self) -> EntryPatch | None:
        """The next patch, waiting for one if need be; None once closed and empty."""
        while not self._waiting:
            if self._closed:
                return None
            if not self._asleep:  # else another reader sleeps on _changed: share its event, or
                self._changed = anyio.Event()  # it would wait on one nobody sets, even at close
                self._asleep = True
            await self._changed.wait()
        patch = self._waiting.popitem(last=False)[1]
        # The producer goes on once half the limit is read: woken per chunk, not per patch.
        if self._room is not None and self._limit is not None and len(self._waiting) <= self._limit // 2:
            self._room.set()
        return patch
