"""`orchestrate serve`'s live streams: how many events per second reach 100 concurrent SSE
subscribers, and how much later than the library's own consumer a stream client sees an agent's
output.  Every figure is a ratio against a baseline measured in the same run.

Fan-out: a server with no worker; the subscribers (raw sockets in this process's event loop) all
follow one task's stream; this process then writes ``--events`` events into the store (as a worker
would) and times until every subscriber has the last one.  Baseline: writing the same events with
nobody listening.  Reported: events/s delivered per subscriber and in all, each as a multiple of the
baseline's events/s.

Latency: a server with its worker runs a fake Claude CLI that writes ``--deltas`` text deltas, one
every ``--interval`` s, each carrying the wall-clock time it was written; a stream client reads the
newest time in each patch it receives.  Baseline: the same fake run by the library in this process
(``orchestrate.Run``, what ``orchestrate run --output jsonl`` prints from).  Reported: p50 / p95 of
each, and the added delay.

    python bench/serve_stream.py [--subscribers 100] [--events 20000] [--deltas 100] [--interval 0.02]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson

from orchestrate import AutoApprove, ExecutorOptions, Run, Task, get_executor
from orchestrate.store import Store

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = """
import json, sys
from orchestrate.serve.config import ServeConfig
from orchestrate.serve.server import serve
serve(ServeConfig(**json.loads(sys.argv[1])), say=lambda s: print(s, file=sys.stderr, flush=True),
      log_level="warning")
"""
FAKE = """
import json, sys, time
deltas, interval = int(sys.argv[1]), float(sys.argv[2])
sid = "00000000-0000-4000-8000-000000000001"
def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\\n")
    sys.stdout.flush()
sys.stdin.readline()  # the prompt
ev = {"type": "stream_event", "session_id": sid, "parent_tool_use_id": None}
emit({"type": "system", "subtype": "init", "session_id": sid, "model": "m"})
emit({**ev, "event": {"type": "message_start", "message": {"id": "msg_1"}}})
emit({**ev, "event": {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}})
time.sleep(0.3)
for _ in range(deltas):
    time.sleep(interval)
    d = {"type": "text_delta", "text": f"t={time.time():.6f};"}
    emit({**ev, "event": {"type": "content_block_delta", "index": 0, "delta": d}})
emit({**ev, "event": {"type": "content_block_stop", "index": 0}})
emit({"type": "result", "subtype": "success", "is_error": False, "session_id": sid, "usage": {}})
"""
_STAMP = re.compile(rb"t=(\d+\.\d+);")


class Server:
    def __init__(self, home: Path, **config: Any) -> None:
        settings = {"port": 0, "allow_commands": True} | config
        env = os.environ | {"ORCHESTRATE_HOME": str(home), "PYTHONPATH": str(ROOT)}
        self.home = home
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, json.dumps(settings)],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
        )
        assert self.proc.stderr is not None
        base = token = None
        deadline = time.monotonic() + 60
        while (base is None or token is None) and time.monotonic() < deadline:
            line = self.proc.stderr.readline().decode()
            if not line:
                raise SystemExit("the server did not start")
            if line.startswith("orchestrate serve on "):
                base = line.split()[3]
            elif line.startswith("board: "):
                token = line.strip().rpartition("#token=")[2]
        assert base and token
        self.base, self.token = base, token
        threading.Thread(target=lambda: [None for _ in self.proc.stderr or []], daemon=True).start()
        self.http = httpx.Client(base_url=base, headers={"authorization": f"Bearer {token}"}, timeout=30)

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(20)


# --- fan-out ----------------------------------------------------------------------------------------


async def subscriber(
    server: Server, task_id: int, want: int, ready: asyncio.Event, done: list[float]
) -> None:
    host, port = server.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"GET /api/tasks/{task_id}/stream HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {server.token}\r\n\r\n".encode()
    )
    pattern = b"\nevent: notice\n"
    tail = b""
    seen = 0
    ready.set()
    while seen < want:
        chunk = await reader.read(1 << 16)
        if not chunk:
            raise SystemExit("a stream ended early")
        data = tail + chunk
        seen += data.count(pattern)
        tail = data[-(len(pattern) - 1) :]
    done.append(time.perf_counter())
    writer.close()


def write_events(store: Store, task_id: int, n: int, body: bytes) -> float:
    """Write ``n`` events in batches of 100 (as the engine's writer does); returns when it began."""
    began = time.perf_counter()
    for start in range(0, n, 100):
        store.append([(task_id, None, "notice", body, time.time()) for _ in range(min(100, n - start))])
    return began


async def fanout(server: Server, subscribers: int, events: int, cwd: Path) -> tuple[float, float]:
    """(seconds until every subscriber had all events, seconds the writing took)."""
    task = server.http.post("/api/tasks", json={"prompt": "p", "executor": "claude-code", "cwd": str(cwd)})
    task_id = task.json()["task"]["id"]
    body = orjson.dumps({"notice": "x" * 100})
    done: list[float] = []
    readies = [asyncio.Event() for _ in range(subscribers)]
    tasks = [asyncio.create_task(subscriber(server, task_id, events, r, done)) for r in readies]
    for r in readies:
        await r.wait()
    await asyncio.sleep(0.5)  # every stream open and past its first events
    with Store.open(f"sqlite:///{server.home / 'store.db'}") as store:
        writing = asyncio.get_running_loop().run_in_executor(None, write_events, store, task_id, events, body)
        await asyncio.gather(*tasks)
        began = await writing
        wrote = time.perf_counter() - began
    return max(done) - began, wrote


def baseline_writes(home: Path, events: int, cwd: Path) -> float:
    with Store.open(f"sqlite:///{home / 'store.db'}") as store:
        from orchestrate.store import TaskSpec

        task = store.submit(TaskSpec(prompt="p", executor="claude-code", cwd=cwd))
        began = write_events(store, task.id, events, orjson.dumps({"notice": "x" * 100}))
        return time.perf_counter() - began


# --- latency ----------------------------------------------------------------------------------------


def fake_options(script: Path, args: argparse.Namespace) -> dict[str, Any]:
    return {"base_command": [sys.executable, str(script), str(args.deltas), str(args.interval)]}


async def library_latency(script: Path, args: argparse.Namespace, cwd: Path) -> list[float]:
    executor = get_executor("claude-code", ExecutorOptions(**fake_options(script, args)))
    delays: list[float] = []
    last = 0.0
    async with Run(executor, Task(prompt="go", cwd=cwd), AutoApprove()) as run:
        async for patch in run.patches():
            now = time.time()
            stamps = _STAMP.findall(patch.entry.content.encode())
            if stamps and float(stamps[-1]) > last:
                last = float(stamps[-1])
                delays.append(now - last)
        await run.wait()
    return delays


def serve_latency(server: Server, script: Path, args: argparse.Namespace, cwd: Path) -> list[float]:
    body = {
        "prompt": "go",
        "executor": "claude-code",
        "cwd": str(cwd),
        "executor_options": fake_options(script, args),
    }
    task_id = server.http.post("/api/tasks", json=body).json()["task"]["id"]
    delays: list[float] = []
    last = 0.0
    with server.http.stream("GET", f"/api/tasks/{task_id}/stream", timeout=httpx.Timeout(60)) as r:
        event = ""
        for line in r.iter_lines():
            now = time.time()
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "patch":
                stamps = _STAMP.findall(line.encode())
                if stamps and float(stamps[-1]) > last:
                    last = float(stamps[-1])
                    delays.append(now - last)
            elif line.startswith("data: ") and event == "state":
                status = json.loads(line[6:])["data"]["status"]
                if status in ("done", "failed"):
                    break
    return delays


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--deltas", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--poll", type=float, default=0.05, help="the server's store poll (its default)")
    parser.add_argument("--skip-fanout", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "base").mkdir()
        base_time = baseline_writes(cwd / "base", args.events, cwd)
        base_rate = args.events / base_time
        print(f"baseline: writing {args.events} events with nobody listening: {base_rate:,.0f} events/s")
        home = cwd / "fan"
        home.mkdir()
        server = Server(home, worker=False, poll=args.poll) if not args.skip_fanout else None
        for n in [] if server is None else sorted({1, args.subscribers}):
            try:
                took, wrote = asyncio.run(fanout(server, n, args.events, cwd))
            except BaseException:
                server.close()
                raise
            per = args.events / took
            print(
                f"{n:>4} subscribers: {per:,.0f} events/s each ({per / base_rate:.2f}x baseline), "
                f"{per * n:,.0f} events/s in all ({per * n / base_rate:.2f}x baseline); "
                f"writing took {wrote:.2f}s ({args.events / wrote / base_rate:.2f}x baseline)"
            )

        if server is not None:
            server.close()
        script = cwd / "fake_stamps.py"
        script.write_text(FAKE)
        lib = anyio.run(library_latency, script, args, cwd)
        home = cwd / "lat"
        home.mkdir()
        server = Server(home, poll=args.poll)
        try:
            sse = serve_latency(server, script, args, cwd)
        finally:
            server.close()
        for name, d in (("library (orchestrate.Run)", lib), ("serve, SSE client", sse)):
            print(
                f"latency {name:<26} p50 {pct(d, 0.5):7.1f} ms  p95 {pct(d, 0.95):7.1f} ms  ({len(d)} deltas)"
            )
        added = statistics.median(sse) - statistics.median(lib)
        ratio = statistics.median(sse) / max(statistics.median(lib), 1e-6)
        print(f"added by serve: p50 +{added * 1000:.1f} ms ({ratio:.2f}x the library's p50)")


if __name__ == "__main__":
    main()
