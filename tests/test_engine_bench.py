"""The engine benchmark in its tiny mode, so it cannot rot: it runs, and reports every ratio."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

from .helpers import ROOT


def test_the_engine_benchmark_runs_in_tiny_mode() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "engine_overhead.py"), "--tiny", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert report["tasks"] == 4 and report["events"] == 2000
    assert (
        report["store_events_per_s"] > 0 and report["bare_events_per_s"] > 0 and report["store_vs_bare"] > 0
    )
    assert report["engine_runs_s"] > 0 and report["bare_runs_s"] > 0 and report["engine_vs_bare"] > 0
    assert len(report["rss_mb_at_quarters"]) == 4
