"""Ending a task blocks everything downstream in one transaction; on Postgres that transaction must take
the downstream tasks' row locks in the one order every writer uses (ascending id), all before it touches
a run, or it deadlocks against a writer ending one of those tasks at the same time (Postgres then kills
one of them: a busy error for a caller that did nothing wrong).  Two processes race such cancels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from orchestrate.store import Store, TaskSpec

from .helpers import ROOT
from .services import Postgres

CANCELLER = textwrap.dedent(
    """
    import json, sys, time
    from orchestrate.store import Store, StoreBusyError
    url, targets, stagger = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
    store = Store.open(url)
    store.get(targets[0])  # connected
    print("ready", flush=True)
    for n, task_id in enumerate(targets):
        sys.stdin.readline()  # each round starts at once in both processes, this one a little later
        time.sleep(stagger * (n % 10) / 10)  # swept over the other's transaction
        try:
            store.cancel(task_id)
            print("ok", flush=True)
        except StoreBusyError as exc:
            print(json.dumps(str(exc)[:300]), flush=True)
    store.close()
    """
)


def test_racing_cascades_never_deadlock(postgres: Postgres, tmp_path: Path) -> None:
    url = postgres.database()
    rounds = 25
    with Store.open(url) as store:

        def task(*after: int) -> int:
            spec = TaskSpec(prompt="p", executor="x", cwd=tmp_path, depends_on=list(after))
            return store.submit(spec).id

        uppers, lowers = [], []
        for _ in range(rounds):
            # u <- x, y;  x <- p;  y, p <- q.  Cancelling u blocks x and y, then (depth first, the
            # last pushed first) q before p: a higher id before a lower one.  Cancelling p at the
            # same time locks p, then wants q.
            u = task()
            x, y = task(u), task(u)
            p = task(x)
            task(y, p)
            uppers.append(u)
            lowers.append(p)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CANCELLER, url, json.dumps(targets), str(stagger)],
            cwd=ROOT,
            env=os.environ | {"PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for targets, stagger in ((uppers, 0.0), (lowers, 0.02))
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n", proc.communicate()
    busy = []
    for _ in range(rounds):
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, proc.communicate()
            if line != b"ok\n":
                busy.append(line.decode())
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()[-2000:]
    assert busy == []
    with Store.open(url) as store:
        for u in uppers:
            assert store.get(u).status == "cancelled"
