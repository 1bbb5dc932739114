"""The needs_approval webhook misses no approval and tells none twice while several processes open
approvals at once, on SQLite and on Postgres.  On Postgres an approval's id is taken when its row is
inserted and becomes visible at commit, which may come after a larger id's: a feed that followed ids
(``id > last seen``) skipped those for good; the feed follows the tasks' commit-ordered change numbers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import orjson
import pytest

from orchestrate.serve.config import Webhook
from orchestrate.serve.webhooks import Webhooks, WebhookSender
from orchestrate.store import Limits, Store, TaskSpec

from .helpers import ROOT
from .test_serve_webhooks import SECRET, Receiver

OPENER = textwrap.dedent(
    """
    import json, sys
    from orchestrate.store import Store
    url, run_ids, rounds = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    store = Store.open(url)
    store.run(run_ids[0])  # connected
    print("ready", flush=True)
    sys.stdin.readline()
    opened = []
    for n in range(rounds):
        for run_id in run_ids:
            opened.append(store.open_approval(run_id, {"tool_name": "Bash", "command": f"echo {n}"}).id)
    store.close()
    print(json.dumps(opened), flush=True)
    """
)

WRITERS, RUNS_EACH, ROUNDS = 4, 3, 8


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def watch(store: Store, receiver: Receiver, stop: threading.Event) -> threading.Thread:
    """The server's webhook watcher, polling as fast as it can, in a thread of its own."""

    async def main() -> None:
        async with httpx.AsyncClient(timeout=5) as client:
            hook = Webhook(url=receiver.url, secret=SECRET, max_queue=100_000)
            hooks = Webhooks(store, [WebhookSender(hook, client)], poll=0.002)
            async with anyio.create_task_group() as tg:
                tg.start_soon(hooks.run)
                await anyio.to_thread.run_sync(stop.wait)
                tg.cancel_scope.cancel()

    thread = threading.Thread(target=anyio.run, args=(main,), daemon=True)
    thread.start()
    return thread


def test_every_approval_opened_concurrently_is_told_exactly_once(
    url: str, receiver: Receiver, tmp_path: Path
) -> None:
    store = Store.open(url)
    runs: list[int] = []
    for _ in range(WRITERS * RUNS_EACH):
        store.submit(TaskSpec(prompt="p", executor="x", cwd=tmp_path))
        claimed = store.claim("w", Limits(), 600)
        assert claimed is not None
        runs.append(claimed[1].id)
    # Open before the watcher starts: not news, never told.
    before = store.open_approval(runs[0], {"tool_name": "Bash", "command": "echo before"})
    stop = threading.Event()
    thread = watch(store, receiver, stop)
    env = {"PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, url, json.dumps(runs[i::WRITERS]), str(ROUNDS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(WRITERS)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        time.sleep(0.3)  # the watcher has read its starting point
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        opened: list[int] = []
        for p in procs:
            out, _ = p.communicate(timeout=60)
            assert p.returncode == 0
            opened += json.loads(out)
        assert len(opened) == WRITERS * RUNS_EACH * ROUNDS
        deadline = time.monotonic() + 15
        while len(receiver.events()) < len(opened) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # a second telling of any would arrive by now
    finally:
        stop.set()
        thread.join(10)
        for p in procs:
            p.kill()
        store.close()
    told = [e["approval"]["id"] for e in receiver.events() if e["event"] == "needs_approval"]
    assert before.id not in told
    missed = sorted(set(opened) - set(told))
    assert not missed, f"{len(missed)} approvals never told: {missed[:10]}"
    assert sorted(told) == sorted(opened), "an approval was told twice"
    for e in receiver.events():
        assert e["task"]["id"] == e["approval"]["task_id"]
    assert orjson.loads(receiver.got[0][1])["event"] == "needs_approval"
