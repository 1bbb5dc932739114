"""Side by side with sudocode's agent-execution-engine (the TypeScript engine the agent-executor
seed comes from) on the same captured bytes: Claude stream-json, ``codex exec --json``, Cursor.
(The engine has no normalizer for Codex app-server or ACP.)

Both sides get the stdout bytes of the fixture corpus (the engine reads no stdin), whole and in
64 KiB pieces.  Every time is a multiple of the Python floor (split lines + orjson.loads each)
measured in this run on the same bytes; Node's own floor (split + JSON.parse) is shown too.

Needs Node and the engine installed once: ``npm install --prefix bench/peer`` (pinned in
bench/peer/package.json).

    python bench/peer_compare.py [--mb 10] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import PIPE_CHUNK, Segment, best_of, floor, load, normalize

PEER = Path(__file__).resolve().parent / "peer"
PROTOCOLS = ("claude-stream-json", "codex-exec", "cursor-jsonl")


def node_run(protocol: str, path: Path, repeat: int, chunk: int) -> dict[str, float]:
    cmd = ["node", str(PEER / "harness.mjs"), protocol, str(path), str(repeat), str(chunk)]
    out = subprocess.run(cmd, cwd=PEER, check=True, capture_output=True, text=True, timeout=600)
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("node") is None or not (PEER / "node_modules" / "agent-execution-engine").is_dir():
        sys.exit("needs node and `npm install --prefix bench/peer` (the engine is not installed)")
    print("time as a multiple of the Python floor on the same stdout bytes; lower is better")
    print(f"{'':19} {'':6} {'orchestrate':>12} {'engine':>8} {'node floor':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for protocol in PROTOCOLS:
            data = b"".join(
                s.data for s in load(protocol, int(args.mb * 1e6)).segments if s.stream == "stdout"
            )
            path = Path(tmp) / f"{protocol}.jsonl"
            path.write_bytes(data)
            for name, chunk in (("whole", 0), ("64KiB", PIPE_CHUNK)):
                step = chunk or len(data)
                pieces = [Segment("stdout", data[i : i + step]) for i in range(0, len(data), step)]
                py_floor = best_of(lambda pieces=pieces: floor(pieces), args.repeat)
                ours = best_of(lambda p=protocol, pieces=pieces: normalize(p, pieces), args.repeat)
                peer = node_run(protocol, path, args.repeat, chunk)
                print(
                    f"{protocol:19} {name:6} {ours / py_floor:11.2f}x {peer['engine'] / py_floor:7.2f}x "
                    f"{peer['floor'] / py_floor:10.2f}x   ({len(data) / 1e6:.1f} MB)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
