"""The event writer: one thread that takes events from any number of runs and stores them in batches,
so the event loop never waits for the disk and a busy store costs one transaction per batch, not per
event.

When the store cannot be written (locked, full, read-only) the batch stays at the head of the queue and
is retried with backoff, and the trouble is reported per run; events keep arriving in memory up to a
bound (a count of events and a count of bytes), past which they are counted as dropped (the run's raw
log on disk still has them).  Nothing here raises into the caller.

:meth:`EventWriter.put` never waits, so a producer faster than the store (an agent flooding entries)
would fill the queue up to that bound: a producer that can wait paces itself with
:meth:`EventWriter.wait_below` (see engine/runner.py), and the queue holds a few MiB, not the run.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .errors import StoreBusyError, StoreError, StoreFullError, StoreReadOnlyError
from .rows import NewEvent
from .store import Store

__all__ = ["EventWriter", "Pace", "WriteTrouble"]


@dataclass
class WriteTrouble:
    """What went wrong storing one run's events."""

    error: StoreError
    first: float = field(default_factory=time.monotonic)
    last_ok: float | None = None
    dropped: int = 0

    def describe(self) -> str:
        parts = [f"storing events failed ({self.error})"]
        if self.last_ok is not None:
            parts.append(f"writes resumed after {self.last_ok - self.first:.1f} s")
        if self.dropped:
            parts.append(f"{self.dropped} events could not be kept (the raw log has them)")
        return "; ".join(parts)


class EventWriter:
    """Start with :meth:`start`, :meth:`put` from any thread, :meth:`flush` to wait, then :meth:`close`."""

    def __init__(
        self,
        store: Store,
        *,
        batch: int = 1000,
        interval: float = 0.02,
        max_pending: int = 200_000,
        max_pending_bytes: int = 256 << 20,
        max_backoff: float = 1.0,
    ) -> None:
        self.store = store
        self.batch = batch
        self.interval = interval
        self.max_pending = max_pending
        self.max_pending_bytes = max_pending_bytes
        """What waits may not pass this either: a raw record is a chunk read from the agent, up to
        1 MiB, so a count of events alone bounds nothing."""
        self.max_backoff = max_backoff
        self.trouble: dict[int, WriteTrouble] = {}
        """Per task id: the problem its events met, if any (read after :meth:`flush`)."""
        self.written = 0
        self._pending: deque[NewEvent] = deque()
        self._pending_bytes = 0  # the data of what waits (len of each event's data)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._flushed = threading.Condition(self._lock)
        self._accepted = 0  # events put so far (dropped ones included)
        self._done = 0  # events settled: stored or dropped
        self._closing = False
        self._thread: threading.Thread | None = None
        self._cause: StoreError | None = None
        """Why the store refuses writes now (None: the last write went through)."""

    def start(self) -> EventWriter:
        self._thread = threading.Thread(target=self._loop, name="orchestrate-store-writer", daemon=True)
        self._thread.start()
        return self

    def put(self, task_id: int, run_id: int | None, kind: str, data: bytes | str) -> None:
        """Queue one event; never blocks on the store, never raises."""
        with self._lock:
            self._accepted += 1
            size = len(data)
            if len(self._pending) >= self.max_pending or self._pending_bytes + size > self.max_pending_bytes:
                self._done += 1
                trouble = self.trouble.get(task_id)
                if trouble is None:
                    # Named by the store's own failure (full, locked, read-only) when one is known.
                    trouble = self.trouble[task_id] = WriteTrouble(self._cause or _overflow())
                trouble.dropped += 1
                self._flushed.notify_all()
                return
            self._pending.append((task_id, run_id, kind, data, time.time()))
            self._pending_bytes += size
            if len(self._pending) >= self.batch:
                self._wake.notify()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event put before this call is stored (or dropped); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            target = self._accepted
            self._wake.notify()
            while self._done < target:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._flushed.wait(remaining)
            return True

    @property
    def pending_bytes(self) -> int:
        """The data of the events waiting to be stored."""
        return self._pending_bytes

    def wait_below(self, limit: int, timeout: float) -> bool:
        """Wait (up to ``timeout``) until at most ``limit`` bytes of events wait; False on timeout.
        For a producer that paces itself to the store: blocking, so from a thread of its own."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._wake.notify()  # write now, not at the next interval
            while self._pending_bytes > limit:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._flushed.wait(remaining)
            return True

    def close(self, timeout: float | None = 10.0) -> bool:
        """Store what is queued (up to ``timeout``), then stop the thread; False if events were left."""
        flushed = self.flush(timeout)
        with self._lock:
            self._closing = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        return flushed

    def _loop(self) -> None:
        backoff = 0.0
        while True:
            with self._lock:
                if not self._pending:
                    if self._closing:
                        return
                    self._wake.wait(self.interval)
                if backoff:
                    self._wake.wait(backoff)
                batch = [self._pending[i] for i in range(min(self.batch, len(self._pending)))]
            if not batch:
                continue
            try:
                self.store.append(batch)
            except (StoreBusyError, StoreFullError, StoreReadOnlyError) as exc:
                self._failed(batch, exc)
                backoff = min(max(backoff * 2, 0.05), self.max_backoff)
                if self._closing:
                    self._give_up()
                    return
                continue
            except StoreError as exc:
                # Not a condition that passes (an event for a task that is gone): retrying cannot help.
                self._failed(batch, exc)
                self._drop(len(batch))
                continue
            backoff = 0.0
            self._stored(batch)

    def _stored(self, batch: list[NewEvent]) -> None:
        now = time.monotonic()
        with self._lock:
            for _ in batch:
                self._pending_bytes -= len(self._pending.popleft()[3])
            self._done += len(batch)
            self.written += len(batch)
            self._cause = None
            for task_id in {e[0] for e in batch}:
                trouble = self.trouble.get(task_id)
                if trouble is not None and trouble.last_ok is None:
                    trouble.last_ok = now
            self._flushed.notify_all()

    def _failed(self, batch: list[NewEvent], exc: StoreError) -> None:
        with self._lock:
            self._cause = exc
            for task_id in {e[0] for e in batch}:
                trouble = self.trouble.get(task_id)
                if trouble is None or trouble.last_ok is not None:
                    self.trouble[task_id] = WriteTrouble(exc, dropped=trouble.dropped if trouble else 0)
                elif type(trouble.error) is StoreError and trouble.error.args == _overflow().args:
                    trouble.error = exc  # the queue overflowed first: the store's failure is the cause

    def _drop(self, n: int) -> None:
        with self._lock:
            for _ in range(n):
                task_id, _, _, data, _ = self._pending.popleft()
                self._pending_bytes -= len(data)
                self.trouble[task_id].dropped += 1
            self._done += n
            self._flushed.notify_all()

    def _give_up(self) -> None:
        # Closing while the store still fails: count what is left as dropped, so no flush waits forever.
        with self._lock:
            while self._pending:
                task_id, _, _, data, _ = self._pending.popleft()
                self._pending_bytes -= len(data)
                trouble = self.trouble.setdefault(task_id, WriteTrouble(StoreError("the writer stopped")))
                trouble.dropped += 1
                self._done += 1
            self._flushed.notify_all()


class Pace:
    """One producer's pace to the store: once more than ``high`` bytes wait to be written, it waits
    until half of that is left, so what waits stays a few MiB whatever the producer makes.  A wait
    that runs out (a store locked for ``timeout`` seconds) turns pacing off for this producer: it
    goes on as if unpaced, and the writer's own bounds apply (events dropped are said on the run)."""

    def __init__(self, writer: EventWriter, high: int = 4 << 20, timeout: float = 10.0) -> None:
        self.writer = writer
        self.high = high
        self.timeout = timeout
        self.on = True

    @property
    def due(self) -> bool:
        """Whether :meth:`wait` would wait (cheap: no lock)."""
        return self.on and self.writer.pending_bytes > self.high

    def wait(self) -> None:
        """Wait until the store has caught up, if it must (blocking: from a thread of its own)."""
        if self.due and not self.writer.wait_below(self.high // 2, self.timeout):
            self.on = False


def _overflow() -> StoreError:
    return StoreError("too many events waiting for the store")
