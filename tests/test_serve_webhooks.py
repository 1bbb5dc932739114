"""Webhooks: a local receiver is told (signed) when a task needs approval, is done, or failed; a
receiver that fails is retried with backoff; a dead one costs a bounded queue."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import itertools
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from orchestrate.serve.config import Webhook
from orchestrate.serve.webhooks import Delivery, WebhookSender, sign

from .helpers import FAKE_CLAUDE
from .test_serve_api import start_server

SECRET = "a-webhook-secret-0123456789"


class Receiver:
    """An HTTP server on 127.0.0.1 that records each POST, failing the first ``fail`` ones with 500."""

    def __init__(self, fail: int = 0) -> None:
        self.got: list[tuple[dict[str, str], bytes, float]] = []
        self.fail = fail
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                outer.got.append(({k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()))
                status = 500 if len(outer.got) <= outer.fail else 204
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[dict[str, Any]]:
        return [orjson.loads(body) for _, body, _ in self.got]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(fail=2)
    yield r
    r.close()


def wait_for(pred: Any, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def test_needs_approval_done_and_failed_are_told_signed_and_retried(
    receiver: Receiver, tmp_path: Path
) -> None:
    hook = {"url": receiver.url, "secret": SECRET, "backoff": 0.1}
    server = start_server(tmp_path / "home", webhooks=[hook])
    try:
        with server.client() as http:
            options = {"base_command": [sys.executable, str(FAKE_CLAUDE)]}
            base = {"executor": "claude-code", "cwd": str(tmp_path), "executor_options": options}
            asks = http.post("/api/tasks", json=base | {"prompt": "tool"}).json()["task"]["id"]
            wait_for(lambda: any(e["event"] == "needs_approval" for e in receiver.events()))
            [open_one] = http.get("/api/approvals", params={"task_id": asks}).json()
            http.post(f"/api/approvals/{open_one['id']}", json={"decision": "approve"})
            crashes = http.post("/api/tasks", json=base | {"prompt": "crash"}).json()["task"]["id"]
            wait_for(lambda: {e["event"] for e in receiver.events()} >= {"needs_approval", "done", "failed"})
            health = http.get("/api/health").json()["webhooks"]
    finally:
        server.stop()
    by_event = {e["event"]: e for e in receiver.events()}
    assert by_event["needs_approval"]["task"]["id"] == asks
    assert by_event["needs_approval"]["approval"]["request"]["command"] == "echo original"
    assert by_event["done"]["task"]["id"] == asks and by_event["done"]["task"]["status"] == "done"
    assert by_event["failed"]["task"]["id"] == crashes
    # Every delivery is signed over its timestamp and body; a retry repeats the delivery id.
    for headers, body, _ in receiver.got:
        expected = sign(SECRET, headers["x-orchestrate-timestamp"], body)
        assert hmac.compare_digest(headers["x-orchestrate-signature"], expected)
        mac = hmac.new(
            SECRET.encode(), f"{headers['x-orchestrate-timestamp']}.".encode() + body, hashlib.sha256
        )
        assert headers["x-orchestrate-signature"] == "sha256=" + mac.hexdigest()
        assert headers["x-orchestrate-event"] == orjson.loads(body)["event"]
    first_three = receiver.got[:3]
    assert len({h["x-orchestrate-delivery"] for h, _, _ in first_three}) == 1  # 500, 500, then 204
    gaps = [b[2] - a[2] for a, b in itertools.pairwise(first_three)]
    assert gaps[0] >= 0.09 and gaps[1] >= 0.19  # backoff doubles
    # Each event once (after its retries): no second "done" for the same task.
    delivered = [orjson.loads(b)["event"] for h, b, _ in receiver.got[2:]]
    assert sorted(delivered) == ["done", "failed", "needs_approval"]
    assert health[0]["sent"] == 3 and health[0]["dropped"] == 0


def test_a_dead_receiver_costs_a_bounded_queue_and_4xx_is_not_retried() -> None:
    async def main() -> None:
        calls: list[int] = []

        def handler(request: httpx.Request) -> httpx.Response:
            calls.append(1)
            return httpx.Response(400 if request.headers["x-orchestrate-event"] == "done" else 503)

        hook = Webhook(url="http://127.0.0.1:9/x", secret=SECRET, backoff=0.01, attempts=3, max_queue=5)
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            sender = WebhookSender(hook, client)
            for i in range(50):
                sender.put(Delivery("failed", orjson.dumps({"i": i})))
            assert len(sender.queue) == 5 and sender.dropped == 45
            assert [orjson.loads(d.body)["i"] for d in sender.queue] == [
                45,
                46,
                47,
                48,
                49,
            ]  # the newest kept
            sender.queue.clear()
            sender.put(Delivery("done", b"{}"))
            sender.put(Delivery("failed", b"{}"))
            with anyio.move_on_after(5):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(sender.run)
                    while sender.sent + sender.failed < 2:  # noqa: ASYNC110 (the sender has no event)
                        await anyio.sleep(0.01)
                    tg.cancel_scope.cancel()
        assert (sender.sent, sender.failed) == (0, 2)
        assert len(calls) == 1 + 3  # the 400 once, the 503 three times

    anyio.run(main)


def test_a_webhook_needs_a_real_url_and_secret() -> None:
    with pytest.raises(ValueError, match="url"):
        Webhook(url="file:///etc/passwd", secret=SECRET)
    with pytest.raises(ValueError, match="secret"):
        Webhook(url="https://example.org/h", secret="short")
