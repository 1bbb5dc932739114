"""Peak memory of replaying a long Claude transcript through a consumer that streams (each patch
handed on, none kept), for transcripts of 10 MB and 100 MB (and 1 GB with ``--gb``).

The transcript is a raw log: the Claude fixtures' records repeated, one run that goes on, with the
message, tool and request ids made unique per repetition (as in a real session, so the
normalizer's per-id tables grow as they would).  ``replay(..., streaming=True)`` is measured;
``--keep`` adds the default mode, which keeps every entry (what a caller of ``.entries`` gets).  Each
size is replayed in a fresh interpreter; its peak RSS is compared with the baseline of a fresh
interpreter that imports the same modules and reads the same file record by record, so the
difference is what normalizing keeps.  Flat means: the same extra memory at 10 MB as at 100 MB.

    python bench/replay_memory.py [--sizes 10,100] [--gb]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
CHILD = """
import resource, sys
from pathlib import Path
from orchestrate import get_executor
from orchestrate.process.rawlog import read_raw_log
from orchestrate.replay import replay
path, mode = Path(sys.argv[1]), sys.argv[2]
patches = 0
if mode in ("replay", "keep"):
    normalizer = get_executor("claude-code").create_normalizer()
    for patch in replay(path, normalizer, streaming=mode == "replay"):
        patches += 1
else:
    for record in read_raw_log(path)[1]:
        patches += 1
print(patches, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def transcript(path: Path, size: int) -> None:
    """A raw log of ``size`` bytes: the Claude fixtures' records, repeated with fresh ids."""
    records = []
    for fixture in sorted((FIXTURES / "claude-stream-json").glob("*.jsonl")):
        records.extend(fixture.read_bytes().splitlines(keepends=True)[1:])
    header = {"type": "header", "format": "orchestrate-rawlog", "version": 1, "executor": "claude-code"}
    written = 0
    with path.open("wb") as f:
        f.write(orjson.dumps(header) + b"\n")
        round_ = 0
        while written < size:
            round_ += 1
            for rec in records:
                rec = rec.replace(b"_scripted_", b"_scripted_r%d_" % round_)
                rec = rec.replace(b"req_", b"req_r%d_" % round_)
                f.write(rec)
                written += len(rec)


def peak(path: Path, mode: str) -> tuple[int, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), mode],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    count, rss = out.stdout.split()
    return int(count), int(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100", help="transcript sizes in MB")
    parser.add_argument("--gb", action="store_true", help="also 1 GB (needs the disk and minutes)")
    parser.add_argument("--keep", action="store_true", help="also the default mode (every entry kept)")
    args = parser.parse_args()
    sizes = [float(x) for x in args.sizes.split(",") if x] + ([1000.0] if args.gb else [])
    header = f"{'transcript':>10} {'patches':>10} {'read only':>10} {'replay':>10} {'kept by replay':>15}"
    print(header + (f" {'keep-all mode':>14} {'kept':>8}" if args.keep else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for mb in sizes:
            path = Path(tmp) / "transcript.jsonl"
            transcript(path, int(mb * 1e6))
            _, base = peak(path, "read")
            patches, rss = peak(path, "replay")
            row = (
                f"{mb:8g}MB {patches:10d} {base / 1e6:8.0f}MB {rss / 1e6:8.0f}MB {(rss - base) / 1e6:13.1f}MB"
            )
            if args.keep:
                _, kept = peak(path, "keep")
                row += f" {kept / 1e6:12.0f}MB {(kept - base) / 1e6:6.1f}MB"
            print(row, flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
