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
from sqlalchemy import func, select

from ..store import ApprovalRecord, Store, StoreError, TaskRecord
from ..store.schema import approvals
from .config import Webhook
from .streams import changed_tasks, newest_task_key

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

    def stats(self) -> list[dict[str, Any]]:
        return [s.stats() for s in self.senders]

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            for sender in self.senders:
                tg.start_soon(sender.run)
            await self._watch()

    async def _watch(self) -> None:
        tasks_after, approvals_after = await anyio.to_thread.run_sync(self._start)
        while True:
            try:
                changed = await anyio.to_thread.run_sync(changed_tasks, self.store, tasks_after, 500)
                opened = await anyio.to_thread.run_sync(self._opened, approvals_after)
            except StoreError as exc:
                _log.warning("webhooks: reading the store failed: %s", exc)
                await anyio.sleep(self.poll)
                continue
            for approval in opened:
                approvals_after = approval.id
                if approval.status == "open":
                    task = await anyio.to_thread.run_sync(self.store.get, approval.task_id)
                    self._send("needs_approval", task, approval)
            for number, task in changed:
                tasks_after = number
                self._task_changed(task)
            if len(changed) < 500:
                await anyio.sleep(self.poll)

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

    def _start(self) -> tuple[int, int]:
        with self.store.engine.connect() as conn:
            last_approval = conn.execute(select(func.max(approvals.c.id))).scalar()
        return newest_task_key(self.store), int(last_approval or 0)

    def _opened(self, after: int) -> list[ApprovalRecord]:
        with self.store.engine.connect() as conn:
            rows = conn.execute(
                select(approvals).where(approvals.c.id > after).order_by(approvals.c.id).limit(500)
            )
            return [ApprovalRecord(**dict(r._mapping)) for r in rows]
