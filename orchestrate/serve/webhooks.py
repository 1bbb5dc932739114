"""Webhooks: a URL is told when a task needs approval, is done, or failed, so a person can be told
on their phone or in their chat.

Each delivery is a JSON POST with::

    X-Orchestrate-Event: needs_approval | done | failed
    X-Orchestrate-Delivery: a unique id (the same on every retry of one delivery)
    X-Orchestrate-Timestamp: seconds since the epoch
    X-Orchestrate-Signature: sha256=HEX, HMAC-SHA256 under the webhook's secret of "TIMESTAMP." + body

A receiver recomputes the signature and refuses an old timestamp (a replay).  A delivery that fails
(no connection, a timeout, 5xx or 429) is retried with exponential backoff, a few times; a 4xx other
than 429 is not retried.  Each webhook has a bounded queue: past it the oldest deliveries are dropped
and counted (``GET /api/health``), so a dead receiver never grows the server's memory.

What happened is read from the store, not from this process's engine, so a server without a worker
(workers elsewhere on the store) notifies as well.  Deliveries start from the server's start: what
happened while it was down is not sent.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import orjson

from ..store import ApprovalRecord, Store, StoreError, TaskRecord
from .config import Webhook

__all__ = ["Delivery", "WebhookSender", "Webhooks", "sign"]

_log = logging.getLogger("orchestrate.serve")

_EVENT_OF_STATUS = {"done": "done", "failed": "failed", "lost": "failed"}


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


@dataclass(frozen=True)
class Delivery:
    event: str
    body: bytes
    id: str = field(default_factory=lambda: uuid.uuid4().hex)


class WebhookSender:
    """One webhook's queue and the task that empties it, in order."""

    def __init__(self, hook: Webhook, client: httpx.AsyncClient) -> None:
        self.hook = hook
        self.client = client
        self.queue: deque[Delivery] = deque()
        self.max_queue = hook.max_queue
        self.attempts = hook.attempts
        self.backoff = hook.backoff
        self.ready = anyio.Event()
        self.sent = 0
        self.failed = 0
        self.dropped = 0

    def put(self, delivery: Delivery) -> None:
        if delivery.event not in self.hook.events:
            return
        if len(self.queue) >= self.max_queue:
            self.queue.popleft()
            self.dropped += 1
        self.queue.append(delivery)
        self.ready.set()

    async def run(self) -> None:
        while True:
            while not self.queue:
                await self.ready.wait()
                self.ready = anyio.Event()
            delivery = self.queue.popleft()
            if await self._deliver(delivery):
                self.sent += 1
            else:
                self.failed += 1

    async def _deliver(self, delivery: Delivery) -> bool:
        for attempt in range(self.attempts):
            if attempt:
                await anyio.sleep(self.backoff * 2 ** (attempt - 1))
            stamp = str(int(time.time()))
            headers = {
                "content-type": "application/json",
                "user-agent": "orchestrate-webhook/1",
                "x-orchestrate-event": delivery.event,
                "x-orchestrate-delivery": delivery.id,
                "x-orchestrate-timestamp": stamp,
                "x-orchestrate-signature": sign(self.hook.secret, stamp, delivery.body),
            }
            try:
                response = await self.client.post(self.hook.url, content=delivery.body, headers=headers)
            except httpx.HTTPError as exc:
                _log.warning("webhook %s: %s (attempt %d)", self.hook.url, exc, attempt + 1)
                continue
            if response.status_code < 300:
                return True
            if response.status_code < 500 and response.status_code != 429:
                _log.warning("webhook %s refused %s: %d", self.hook.url, delivery.id, response.status_code)
                return False
        return False

    def stats(self) -> dict[str, Any]:
        return {
            "url": self.hook.url,
            "queued": len(self.queue),
            "sent": self.sent,
            "failed": self.failed,
            "dropped": self.dropped,
        }


class Webhooks:
    """Watches the store and hands each event to every webhook's sender."""

    def __init__(self, store: Store, senders: list[WebhookSender], *, poll: float = 0.25) -> None:
        self.store = store
        self.senders = senders
        self.poll = poll
        self._fired: OrderedDict[tuple[int, str], None] = OrderedDict()
        self._told: dict[int, set[int]] = {}  # task id -> its open approvals already told

    def stats(self) -> list[dict[str, Any]]:
        return [s.stats() for s in self.senders]

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            for sender in self.senders:
                tg.start_soon(sender.run)
            await self._watch()

    async def _watch(self) -> None:
        # Follows tasks by their change number (commit-ordered, store/clock.py); opening an approval
        # changes its task, so each changed task's open approvals not yet told are the news.  Approval
        # ids are not followed: on Postgres a smaller id can commit after a larger one was read.
        after, already = await anyio.to_thread.run_sync(self.store.open_approvals_now)
        for approval in already:
            self._told.setdefault(approval.task_id, set()).add(approval.id)
        while True:
            try:
                changed, opened = await anyio.to_thread.run_sync(
                    self.store.changes_with_approvals, after, 500
                )
            except StoreError as exc:
                _log.warning("webhooks: reading the store failed: %s", exc)
                await anyio.sleep(self.poll)
                continue
            self._approvals_seen([task for _, task in changed], opened)
            for number, task in changed:
                after = number
                self._task_changed(task)
            if len(changed) < 500:
                await anyio.sleep(self.poll)

    def _approvals_seen(self, changed: list[TaskRecord], opened: list[ApprovalRecord]) -> None:
        """Tell each open approval of the changed tasks once.  What is remembered is only the told
        approvals still open as last read, so it stays as small as the store's open approvals."""
        by_task: dict[int, list[ApprovalRecord]] = {}
        for approval in opened:
            by_task.setdefault(approval.task_id, []).append(approval)
        tasks = {task.id: task for task in changed}
        for task_id, task in tasks.items():
            now_open = by_task.get(task_id, [])
            told = self._told.pop(task_id, set())
            new = [a for a in now_open if a.id not in told]
            still = {a.id for a in now_open}
            if still:
                self._told[task_id] = still
            for approval in new:
                self._send("needs_approval", task, approval)

    def _task_changed(self, task: TaskRecord) -> None:
        event = _EVENT_OF_STATUS.get(task.status)
        if event is None:
            self._fired.pop((task.id, "end"), None)  # running again: its next end is news
            return
        if (task.id, "end") in self._fired:
            return
        self._fired[(task.id, "end")] = None
        while len(self._fired) > 10_000:
            self._fired.popitem(last=False)
        self._send(event, task, None)

    def _send(self, event: str, task: TaskRecord, approval: ApprovalRecord | None) -> None:
        body = orjson.dumps(
            {
                "event": event,
                "ts": time.time(),
                "task": task.model_dump(mode="json"),
                "approval": approval.model_dump(mode="json") if approval else None,
            }
        )
        for sender in self.senders:
            sender.put(Delivery(event, body))
