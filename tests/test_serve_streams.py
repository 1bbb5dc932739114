"""Slow clients: a reader that takes nothing holds no memory in the server (the stream is served from
one shared, bounded ring and from the store), is dropped after the send timeout, and resumes from
its Last-Event-ID with nothing missed or doubled; a fast reader on the same task is not slowed."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import orjson

from orchestrate.store import Store

from .test_serve_api import Stream, start_server

EVENTS = 3000
SIZE = 8000  # bytes of each event: 24 MB a round, far more than the ring (1 MB) may hold


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_reader_that_takes_nothing_holds_no_memory_and_resumes_exactly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    server = start_server(home, worker=False, send_timeout=1.5, ring_bytes=1 << 20, ring_items=512)
    try:
        with server.client() as http:
            task_id = http.post(
                "/api/tasks", json={"prompt": "p", "executor": "claude-code", "cwd": str(tmp_path)}
            ).json()["task"]["id"]
            # The stuck reader: a tiny receive buffer, reads the headers and then nothing.
            slow = socket.socket()
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            host, port = server.base.removeprefix("http://").split(":")
            slow.connect((host, int(port)))
            slow.sendall(
                f"GET /api/tasks/{task_id}/stream HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Authorization: Bearer {server.token}\r\n\r\n".encode()
            )
            slow.settimeout(10)
            head = slow.recv(200)
            assert head.startswith(b"HTTP/1.1 200"), head
            fast = Stream(http, f"/api/tasks/{task_id}/stream")
            assert fast.next().data["data"]["status"] == "queued"
            # Another process (a worker) writes 2 x 24 MB of events meanwhile; the fast reader gets
            # every one, in order, while the slow one is stuck.  The first round warms the server up
            # (thread arenas, the store's page caches); the second must not grow it: a server that
            # kept what the stuck reader has not taken would grow by all of it again.
            pad = "x" * SIZE
            sizes = []
            with Store.open(f"sqlite:///{home / 'store.db'}") as store:
                for first in (0, EVENTS):
                    for start in range(first, first + EVENTS, 200):
                        batch = [
                            (task_id, None, "notice", orjson.dumps({"notice": f"{i} {pad}"}), time.time())
                            for i in range(start, start + 200)
                        ]
                        store.append(batch)
                    deadline = time.monotonic() + 60
                    for i in range(first, first + EVENTS):
                        m = fast.next()
                        assert m.data["data"]["notice"].startswith(f"{i} ") and m.id == str(i + 2)
                        assert i % 500 or time.monotonic() < deadline
                    sizes.append(rss(server.proc.pid))
            fast.close()
            grown = sizes[1] - sizes[0]
            assert grown < EVENTS * SIZE / 2, f"the server grew by {grown} bytes in the second round"
            health = http.get("/api/health").json()
            assert health["feeds"]["bytes"] <= (1 << 20) + 600 * (SIZE + 200)

            # The stuck reader was dropped: what the kernel buffered, then the end of the stream.
            got = b"" + head
            slow.settimeout(10)
            while chunk := slow.recv(1 << 16):
                got += chunk
            slow.close()
            # The server closed it (the loop above ended at end of stream) before it had everything.
            # How much got through first depends on the machine's load (the drop comes a send timeout
            # after the socket stops taking), so this is no measure of memory: the server's own size
            # and its feeds' bytes, asserted above, are.
            assert len(got) < 2 * EVENTS * SIZE
            # It resumes from the last event it has whole: the rest comes, exactly once each.
            complete = got.rfind(b"\n\n")
            whole = [int(line[4:]) for line in got[:complete].split(b"\n") if line.startswith(b"id: ")]
            last = whole[-1] if whole else 0
            # (The seam is what matters: past it the resumed stream is any stream.)
            resumed = Stream(http, f"/api/tasks/{task_id}/stream", {"last-event-id": str(last)})
            try:
                rest = [resumed.next() for _ in range(300)]
            finally:
                resumed.close()
            assert whole + [int(m.id or 0) for m in rest] == list(range(1, last + 301))
            assert [m.data["data"]["notice"].split()[0] for m in rest] == [
                str(i - 2) for i in range(last + 1, last + 301)
            ]
    finally:
        server.stop()
    assert any("stream dropped" in line for line in server.log), "".join(server.log[-20:])
