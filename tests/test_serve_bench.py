"""bench/serve_stream.py runs, in a tiny mode, and prints its ratios (no timing is asserted)."""

from __future__ import annotations

import re

from .test_bench import RATIO, bench


def test_serve_stream_bench_reports_fanout_and_latency_ratios() -> None:
    out = bench("serve_stream.py", "--subscribers", "3", "--events", "300", "--deltas", "5", timeout=120)
    assert re.search(r"baseline: writing 300 events .*: [\d,]+ events/s", out), out
    for n in (1, 3):
        assert re.search(rf"^ +{n} subscribers: [\d,]+ events/s each \({RATIO} baseline\)", out, re.M), out
    assert re.search(r"latency serve, SSE client +p50 +\d+\.\d ms", out), out
    assert re.search(rf"added by serve: p50 [+-]\d+\.\d ms \({RATIO} the library's p50\)", out), out
