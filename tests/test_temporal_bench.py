"""The Temporal benchmark in its tiny mode, against the session's dev server, so it cannot rot."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

from .helpers import ROOT
from .services import Temporal


def test_the_temporal_benchmark_runs_in_tiny_mode(temporal: Temporal) -> None:
    bench = str(ROOT / "bench" / "temporal_throughput.py")
    done = subprocess.run(
        [sys.executable, bench, "--tiny", "--json", "--address", temporal.address],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert (report["tasks"], report["turns"]) == (4, 2)
    assert report["embedded_tasks_per_min"] > 0 and report["temporal_tasks_per_min"] > 0
    assert report["temporal_vs_embedded"] > 0
    assert report["embedded_turn_ms"] > 0 and report["temporal_turn_ms"] > 0
    assert "added_ms_per_turn" in report
