"""A Temporal test's cluster: its own store on the session's Postgres, its own task queue and workflow
prefix on the session's dev server, and the ``orchestrate worker --temporal`` processes it started
(the ``cluster`` fixture in conftest.py makes one per test and kills its workers at the end)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

from orchestrate.store import Store, TaskSpec

from .helpers import FAKE_CLAUDE, ROOT
from .services import Temporal

__all__ = ["FAKE", "Cluster", "workflow_states"]

FAKE = {"base_command": [sys.executable, str(FAKE_CLAUDE)]}


class Cluster:
    """A test's store, Temporal names, and the worker processes it started (killed at the end)."""

    def __init__(self, url: str, temporal: Temporal, tmp_path: Path) -> None:
        self.url = url
        self.address = temporal.address
        self.prefix = f"t{uuid.uuid4().hex[:10]}"
        self.queue = f"{self.prefix}-q"
        self.tmp = tmp_path
        self.store = Store.open(url)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.mark = f"temporal-{os.getpid()}-{time.monotonic_ns()}"

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = self.tmp / f"{name}.log"
        command = [sys.executable, "-m", "orchestrate", "worker", "--temporal", self.address]
        command += ["--store", self.url, "--queue", self.queue, "--workflow-prefix", self.prefix]
        command += ["--heartbeat-timeout", "1.5", "--poll", "0.05", "--capacity", "4", *args]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=os.environ | {"PYTHONPATH": str(ROOT)} | (env or {}),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.workers[name] = proc
        deadline = time.monotonic() + 30
        while b" on " not in log.read_bytes():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        return proc

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()

    def submit(self, prompt: str, **spec: Any) -> int:
        options = FAKE | {"env": {"ORCH_TEST_MARK": self.mark}}
        task = self.store.submit(
            TaskSpec(prompt=prompt, executor="claude-code", executor_options=options, cwd=self.tmp, **spec)
        )
        return task.id

    def wait(self, task_ids: list[int], within: float) -> None:
        deadline = time.monotonic() + within
        while not all(self.store.get(t).finished for t in task_ids):
            dead = {n: p.returncode for n, p in self.workers.items() if p.poll() is not None}
            assert time.monotonic() < deadline, (
                [(t, self.store.get(t).status) for t in task_ids if not self.store.get(t).finished],
                dead,
                {n: self.log(n)[-2000:] for n in self.workers},
            )
            time.sleep(0.05)

    def stop(self) -> None:
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        self.store.close()


def workflow_states(cluster: Cluster, ids: list[int], settle: float = 30.0) -> set[str]:
    """The states of the tasks' workflows once none is still running (or ``settle`` seconds have
    passed): the store says a task ended before its workflow returns, a moment later."""
    from orchestrate.engine.temporal import connect, workflow_id

    async def states() -> set[str]:
        client = await connect(cluster.address)
        deadline = time.monotonic() + settle
        while True:
            found = set()
            for t in ids:
                described = await client.get_workflow_handle(workflow_id(t, cluster.prefix)).describe()
                found.add(described.status.name if described.status else "?")
            if "RUNNING" not in found or time.monotonic() > deadline:
                return found
            await anyio.sleep(0.1)

    return anyio.run(states)
