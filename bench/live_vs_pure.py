"""A live run against the pure normalizer on the same bytes, for every protocol.

A fake CLI per protocol (a few lines of Python, below) speaks just enough of it to hold a run
(Claude's stream-json input, ACP's and Codex app-server's JSON-RPC handshake and prompt, the prompt
on stdin of ``codex exec`` and Cursor), then prints a synthetic session in that protocol's real
shapes (bench/synthetic.py): an answer of ``--answer-kb`` in text deltas of ``--delta`` bytes
(``codex exec`` streams none: one item) and ``--tools`` tool calls, each started and completed.
It writes and flushes every line on its own, as the real CLIs do (``--flush block``: 64 KiB
writes instead).  ``orchestrate.Run`` drives it with the protocol's own driver, writes the raw log
and hands every patch to a consumer that counts them.

The pure side reads that raw log back and feeds its records (the chunks as the live run read them
off the pipes, what it wrote to the agent, its notes), in memory, to a fresh normalizer: the same
bytes in the same pieces, without processes, pipes, event loop, driver or raw log.  Both are this
process's CPU time; the fake agent's own time is not counted.  Rounds alternate live and pure;
each side's best round is reported, and their ratio; then the median of each round's own ratio (its
live side over the pure side run just after it), which a machine whose load changes between rounds
disturbs less than the bests, taken minutes apart.

``--log`` adds, per protocol, what the raw log alone costs on the same chunks (this process's CPU,
best of ``--repeat``): the writer with and without redaction, and the redaction's RE2 anchor scan
over every byte on its own.  It says how much of the live side's overhead the log is.

    python bench/live_vs_pure.py [--protocols claude,acp,app-server,exec,cursor]
        [--answer-kb 1000] [--delta 50] [--tools 2000] [--repeat 3] [--flush line|block] [--log]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import Segment, normalizer
from synthetic import stream

from orchestrate import AutoApprove, ExecutorOptions, Run, Task, get_executor
from orchestrate.process.rawlog import RawLogWriter, read_raw_log
from orchestrate.process.redact import Redactor

FAKE = r"""
import json, sys
protocol, path, flush = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(path, "rb").read().splitlines(keepends=True)
out = sys.stdout.buffer
SID = "00000000-0000-4000-8000-000000000001"

def send(data):
    out.write(data)
    out.flush()

def rpc(obj):
    send(json.dumps(obj).encode() + b"\n")

def session():
    if flush == "line":
        for line in lines:  # one write per line, as the real CLIs print
            send(line)
    else:
        data = b"".join(lines)
        for i in range(0, len(data), 65536):
            send(data[i : i + 65536])

if protocol in ("exec", "cursor"):  # the prompt on stdin, to its end; one turn
    sys.stdin.buffer.read()
    session()
    sys.exit(0)
for raw in sys.stdin.buffer:
    msg = json.loads(raw)
    if protocol == "claude":
        if msg.get("type") == "control_request":
            response = {"subtype": "success", "request_id": msg["request_id"], "response": {}}
            rpc({"type": "control_response", "response": response})
        elif msg.get("type") == "user":
            session()  # ends with its result line
        continue
    method, rid = msg.get("method"), msg.get("id")
    head = {"jsonrpc": "2.0"} if protocol == "acp" else {}
    if method == "initialize":
        rpc({**head, "id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
    elif method == "session/new":
        rpc({**head, "id": rid, "result": {"sessionId": SID}})
    elif method == "thread/start":
        rpc({"id": rid, "result": {"thread": {"id": "t"}, "model": "fake"}})
    elif method == "turn/start":
        rpc({"id": rid, "result": {"turn": {"id": "u"}}})
        session()  # ends with turn/completed
    elif method == "session/prompt":
        session()
        rpc({**head, "id": rid, "result": {"stopReason": "end_turn"}})
    elif rid is not None:
        rpc({**head, "id": rid, "result": {}})
"""


@dataclass(frozen=True)
class Protocol:
    executor: str  # the executor whose driver and normalizer run it
    synthetic: str  # bench/synthetic.py's name for its shapes
    drop_last: bool = False  # the last line answers a request: the fake writes it with the real id


PROTOCOLS = {
    "claude": Protocol("claude-code", "claude-stream-json"),
    "acp": Protocol("gemini", "acp-gemini", drop_last=True),
    "app-server": Protocol("codex", "codex-app-server"),
    "exec": Protocol("codex-exec", "codex-exec"),
    "cursor": Protocol("cursor", "cursor-jsonl"),
}


def session_lines(p: Protocol, args: argparse.Namespace) -> bytes:
    """What the fake prints after the handshake: the synthetic session's stdout."""
    segments = stream(
        p.synthetic, answer_bytes=int(args.answer_kb * 1000), delta=args.delta, tools=args.tools
    )
    lines = b"".join(s.data for s in segments if s.stream == "stdout").splitlines(keepends=True)
    return b"".join(lines[:-1] if p.drop_last else lines)


async def live(
    name: str, p: Protocol, script: Path, capture: Path, flush: str, log: Path
) -> tuple[float, int, int]:
    argv = [sys.executable, str(script), name, str(capture), flush]
    executor = get_executor(p.executor, ExecutorOptions(base_command=argv))
    task = Task(prompt="go", cwd=log.parent, raw_log=log)
    patches = 0
    start = time.process_time()
    async with Run(executor, task, approvals=AutoApprove()) as run:
        async for _ in run.patches():
            patches += 1
        result = await run.wait()
    seconds = time.process_time() - start
    assert result.outcome == "success", (name, result.outcome, result.error)
    return seconds, patches, len(result.entries)


def recorded(log: Path) -> list[Segment]:
    pieces = []
    for rec in read_raw_log(log)[1]:
        pieces.append(Segment(rec.stream, rec.data) if rec.stream else Segment(None, event=rec.event))
    return pieces


def pure(pieces: list[Segment], protocol: str) -> tuple[float, int, int]:
    """The recorded pieces through a fresh normalizer: CPU seconds, patches, entries."""
    start = time.process_time()
    n = normalizer(protocol)
    patches = 0
    for seg in pieces:
        if seg.stream is None:
            patches += len(n.note(seg.event or {}))
        else:
            patches += len(n.feed(seg.data, seg.stream))  # type: ignore[arg-type]
    patches += len(n.finish())
    return time.process_time() - start, patches, len(n.entries)


def log_costs(pieces: list[Segment], tmp: Path, repeat: int) -> tuple[float, float, float]:
    """CPU seconds of the raw log alone on ``pieces``: writer redacting, writer not, anchor scan."""
    chunks = [(s.stream, s.data) for s in pieces if s.stream is not None]
    redactor = Redactor.for_environment(os.environ)

    def write(r: Redactor | None) -> None:
        log = RawLogWriter(tmp / "log-only.jsonl", {"executor": "bench"}, redactor=r)
        for name, data in chunks:
            log.chunk(name, data, 0.0)  # type: ignore[arg-type]
        log.close()

    def scan() -> None:
        for _, data in chunks:
            redactor.finds(data)

    best = []
    for run in (lambda: write(redactor), lambda: write(None), scan):
        times = []
        for _ in range(repeat):
            gc.collect()
            start = time.process_time()
            run()
            times.append(time.process_time() - start)
        best.append(min(times))
    return best[0], best[1], best[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--answer-kb", type=float, default=1000)
    parser.add_argument("--delta", type=int, default=50)
    parser.add_argument("--tools", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--flush", choices=["line", "block"], default="line")
    parser.add_argument("--log", action="store_true", help="also time the raw log alone on the same chunks")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; flush per {args.flush}; CPU time of this process")
    print("protocol        MB   lines  reads  live s  pure s live/pure  median   (live / pure)")
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "fake.py"
        script.write_text(FAKE)
        for name in args.protocols.split(","):
            p = PROTOCOLS[name]
            capture, log = Path(tmp) / f"{name}.jsonl", Path(tmp) / f"{name}-raw.jsonl"
            capture.write_bytes(session_lines(p, args))
            best_live = best_pure = float("inf")
            ratios = []
            for _ in range(args.repeat):
                # Each side starts with no garbage left by the other: a run's objects end in cycles
                # (the normalizer's), freed by a full collection, which the next allocating side
                # would pay for.
                gc.collect()
                seconds, live_patches, live_entries = anyio.run(
                    live, name, p, script, capture, args.flush, log
                )
                best_live = min(best_live, seconds)
                pieces = recorded(log)
                gc.collect()
                pure_seconds, pure_patches, pure_entries = pure(pieces, p.synthetic)
                best_pure = min(best_pure, pure_seconds)
                ratios.append(seconds / pure_seconds)
            out = [s for s in pieces if s.stream == "stdout"]
            size, lines = sum(len(s.data) for s in out) / 1e6, sum(s.data.count(b"\n") for s in out)
            print(
                f"{name:12s} {size:5.1f} {lines:7d} {len(out):6d} {best_live:7.3f} {best_pure:7.3f}"
                f" {best_live / best_pure:8.2f}x {statistics.median(ratios):6.2f}x"
                f"   entries {live_entries} / {pure_entries},"
                f" patches {live_patches} / {pure_patches}",
                flush=True,
            )
            if args.log:
                redacting, plain, scan = log_costs(pieces, Path(tmp), args.repeat)
                share = f"{redacting / best_pure:.0%} / {plain / best_pure:.0%} of pure"
                print(
                    f"{'':12s} raw log alone, redacting / not: {redacting:.3f} / {plain:.3f} s ({share});"
                    f" anchor scan {scan:.3f} s ({size / scan:.0f} MB/s)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
