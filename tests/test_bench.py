"""Every benchmark in bench/ runs, in a tiny mode, and prints what it promises: so the scripts
cannot rot between the times someone runs them for real.  No timing is asserted here (speed is
measured by the benchmarks, not by timed tests)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from .helpers import ROOT

BENCH = ROOT / "bench"
PROTOCOLS = ("claude-stream-json", "codex-app-server", "codex-exec", "acp-gemini", "acp-qwen", "cursor-jsonl")
RATIO = r"\d+\.\d+x"


def bench(name: str, *args: str, timeout: float = 60) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(BENCH / name), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_normalizer_throughput_reports_every_protocol_whole_and_in_pipe_chunks() -> None:
    out = bench("normalizer_throughput.py", "--mb", "0.05", "--repeat", "1", "--answers", "0.01")
    for protocol in PROTOCOLS:
        assert re.search(rf"{protocol} +fixtures .*whole +{RATIO}.*64KiB +{RATIO}", out), out
    assert re.search(rf"claude-stream-json +0.01 MB answer .*whole +{RATIO}", out), out


def test_normalizer_throughput_decomposes_where_the_time_goes() -> None:
    out = bench(
        "normalizer_throughput.py",
        "--mb",
        "0.02",
        "--repeat",
        "1",
        "--answers",
        "",
        "--decompose",
        "--protocol",
        "codex-exec",
    )
    stages = r" +".join(rf"{stage} +{RATIO}" for stage in ("wire", "1 entry", "full", "no patch"))
    assert re.search(rf"codex-exec +decomposed .*{stages}", out), out


def test_scaling_reports_a_doubling_ratio_per_dimension() -> None:
    out = bench("scaling.py", "--scale", "0.005", "--repeat", "1")
    assert re.search(r"claude-stream-json( +\d+\.\d+){5}$", out, re.M), out
    assert re.search(r"acp-qwen +\d+\.\d+( +-){4}$", out, re.M), out


def test_replay_memory_reports_what_replay_keeps() -> None:
    out = bench("replay_memory.py", "--sizes", "0.2", "--keep")
    assert re.search(r"0.2MB +\d+ +\d+MB +\d+MB +-?\d+\.\dMB +\d+MB +-?\d+\.\dMB", out), out


def test_live_run_against_the_pure_normalizer_sees_the_same_entries_for_every_protocol() -> None:
    out = bench("live_vs_pure.py", "--answer-kb", "10", "--tools", "5", "--repeat", "1", "--log")
    assert len(re.findall(r"raw log alone, redacting / not: [\d.]+ / [\d.]+ s .* anchor scan", out)) == 5, out
    for protocol in ("claude", "acp", "app-server", "exec", "cursor"):
        pattern = rf"^{protocol} .* ({RATIO}) +entries (\d+) / (\d+), patches (\d+) / (\d+)$"
        row = re.search(pattern, out, re.M)
        assert row, out
        assert row.group(2) == row.group(3) and int(row.group(2)) > 5, out  # the answer and 5 tools at least
        assert int(row.group(4)) <= int(row.group(5)), out  # a slow reader gets patches coalesced


def test_startup_finds_no_heavy_module_before_the_spawn() -> None:
    out = bench("startup.py", "--repeat", "1")
    assert re.search(r"run, to the spawn +\d+ ms", out), out
    assert re.search(r"run, to the first entry +\d+ ms", out), out
    assert re.search(r"modules loaded at the spawn: [1-9]\d+", out), out
    assert "heavy modules before the spawn: none" in out, out


@pytest.mark.real_cli
def test_first_entry_compares_the_run_with_the_cli_alone() -> None:
    out = bench("first_entry.py", "--rounds", "1", "--warm")
    assert re.search(r"cli alone, first line: +median +\d+ ms", out), out
    assert len(re.findall(rf"added: [+-]\d+ ms +ratio: {RATIO}", out)) == 2, out  # cold, then warm
    assert "bytecode: cached" in out, out  # each checkout run from its compiled modules
    assert re.search(r"first entry: median +\d+ ms .*CPU \d+ ms", out), out
    assert "handed to a warm server (orchestrate warm):" in out, out


@pytest.mark.skipif(
    shutil.which("node") is None or not (BENCH / "peer" / "node_modules" / "agent-execution-engine").is_dir(),
    reason="sudocode's engine is not installed (npm install --prefix bench/peer)",
)
def test_peer_comparison_runs_both_engines() -> None:
    out = bench("peer_compare.py", "--mb", "0.05", "--repeat", "1")
    assert re.search(rf"codex-exec +64KiB +{RATIO} +{RATIO} +{RATIO}", out), out


def test_latency_reports_percentiles_for_the_pipe_and_the_run() -> None:
    out = bench("latency.py", "--runs", "2", "--deltas", "5", "--interval", "0.001")
    assert re.search(r"2 run\(s\) +reading the pipe: +p50 +[\d.]+ ms +p99 +[\d.]+ ms .*\(10 deltas\)", out), (
        out
    )
    assert re.search(r"2 run\(s\) +through Run: +p50 +[\d.]+ ms", out), out
