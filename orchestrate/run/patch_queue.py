"""The patches a run has made and its caller has not read yet, coalesced per entry.

A slow caller must not cost memory per text delta: while an entry's patch waits, a newer one for
the same entry takes its place (the entry is the latest state, so nothing is lost), so what waits is
at most one patch per entry.  Order is the order entries were first touched since the caller last
read them; a waiting ``add`` stays an ``add`` with the newer entry, so every caller still sees an
entry added before it is replaced, and adds in index order.
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
        return self._waiting.popitem(last=False)[1]
