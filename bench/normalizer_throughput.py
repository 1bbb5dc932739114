"""How fast the Claude stream-json normalizer turns bytes into entries, as a ratio to the floor.

The floor (baseline) is what any consumer must do anyway: split the same bytes into lines and
orjson-parse each one.  Both are measured in the same run, on the same synthetic stream (a long
streamed answer, tool calls with results, thinking), so the ratio holds on a noisy machine.

    .venv/bin/python bench/normalizer_throughput.py [--messages N] [--deltas N] [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable

import orjson

from orchestrate.normalizers.claude_stream_json import ClaudeStreamJsonNormalizer


def synthetic_stream(messages: int, deltas: int) -> bytes:
    out = []
    sid = "0f4a8a52-7a1f-4b6c-9d8e-1234567890ab"

    def emit(obj: object) -> None:
        out.append(orjson.dumps(obj))

    emit(
        {"type": "system", "subtype": "init", "session_id": sid, "model": "claude-x", "tools": ["Bash"] * 20}
    )
    for m in range(messages):
        mid = f"msg_{m}"
        ev = {"type": "stream_event", "session_id": sid, "parent_tool_use_id": None, "api_message_id": mid}
        emit({**ev, "event": {"type": "message_start", "message": {"id": mid}}})
        emit(
            {
                **ev,
                "event": {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            }
        )
        text = ""
        for d in range(deltas):
            piece = f"word{d} and some more text "
            text += piece
            emit(
                {
                    **ev,
                    "event": {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                }
            )
        emit(
            {
                "type": "assistant",
                "session_id": sid,
                "message": {"id": mid, "content": [{"type": "text", "text": text}]},
            }
        )
        emit({**ev, "event": {"type": "content_block_stop", "index": 0}})
        tid = f"toolu_{m}"
        emit(
            {
                "type": "assistant",
                "session_id": sid,
                "message": {
                    "id": mid,
                    "content": [
                        {"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": f"echo {m}"}}
                    ],
                },
            }
        )
        emit(
            {
                "type": "user",
                "session_id": sid,
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": tid, "content": "x" * 2000, "is_error": False}
                    ],
                },
                "tool_use_result": {"stdout": "x" * 2000, "stderr": "", "interrupted": False},
            }
        )
    emit({"type": "result", "subtype": "success", "is_error": False, "session_id": sid, "usage": {}})
    return b"\n".join(out) + b"\n"


def baseline(data: bytes) -> int:
    return sum(1 for line in data.split(b"\n") if line and orjson.loads(line))


def normalize(data: bytes) -> int:
    n = ClaudeStreamJsonNormalizer()
    count = 0
    for i in range(0, len(data), 65536):  # pipe-sized chunks, as a live run reads them
        count += len(n.feed(data[i : i + 65536]))
    return count + len(n.finish())


def best_of(fn: Callable[[bytes], int], data: bytes, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(data)
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--deltas", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    data = synthetic_stream(args.messages, args.deltas)
    mb = len(data) / 1e6
    base, base_med = best_of(baseline, data, args.repeat)
    norm, norm_med = best_of(normalize, data, args.repeat)
    tracemalloc.start()
    normalize(data)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    lines = data.count(b"\n")
    print(f"input: {mb:.1f} MB, {lines} lines")
    print(f"baseline (split + orjson): {mb / base:8.1f} MB/s")
    print(f"normalizer:                {mb / norm:8.1f} MB/s")
    print(f"ratio normalizer/baseline: {norm / base:8.2f}x time (median {norm_med / base_med:.2f}x)")
    print(f"peak memory / input size:  {peak / len(data):8.2f}x")


if __name__ == "__main__":
    main()
