"""Does doubling one input dimension double the time?  For every protocol and every dimension:

- bytes: the fixtures (real captures) repeated n and 2n times (n: about 1 MB per protocol), fed to
  one normalizer (a session that goes on);
- deltas: one streamed answer of n and 2n 20-byte deltas;
- tools: n and 2n tool calls, each started and finished;
- lines: n and 2n lines that change nothing (the per-line floor of the protocol);
- requests: n and 2n permission requests, each noted and answered (where the protocol asks).

Prints time(2x) / time(x): about 2 is linear, 4 is quadratic.  Best of ``--repeat`` runs each;
``--steps 2`` doubles twice (n, 2n, 4n: two ratios per cell) to tell a trend from a noisy step.

    python bench/scaling.py [--scale 1.0] [--repeat 5] [--steps 1] [--protocol P] [--dimension D]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import PROTOCOLS, Segment, best_of, load, normalize
from synthetic import STREAMS, WITH_REQUESTS, stream

DIMENSIONS = ["bytes", "deltas", "tools", "lines", "requests"]


def doubling(protocol: str, make: Callable[[int], list[Segment]], n: int, repeat: int, steps: int) -> str:
    """time(2x)/time(x) for each of ``steps`` doublings from ``n``, joined by "/"."""
    times = []
    for k in range(steps + 1):
        segments = make(n * 2**k)
        times.append(best_of(lambda s=segments: normalize(protocol, s, one_session=True), repeat))
    return "/".join(f"{b / a:.2f}" for a, b in itertools.pairwise(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every base size")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1, help="doublings per cell (2: n, 2n, 4n)")
    parser.add_argument("--protocol", action="append", choices=sorted(PROTOCOLS))
    parser.add_argument("--dimension", action="append", choices=DIMENSIONS)
    args = parser.parse_args()
    k = args.scale
    base = {"bytes": 0, "deltas": int(50_000 * k), "tools": int(5_000 * k)}
    base |= {"lines": int(100_000 * k), "requests": int(5_000 * k)}
    base = {d: n for d, n in base.items() if d in (args.dimension or DIMENSIONS)}
    print("time(2x) / time(x) per input dimension: ~2 linear, ~4 quadratic")
    width = 10 * args.steps
    print(f"{'':19} " + "".join(f"{d:>{width}}" for d in base))
    for protocol in args.protocol or PROTOCOLS:
        cells = []
        for dim, n in base.items():
            if dim == "bytes":
                one_set = load(protocol, repeats=1).size
                n = max(1, int(1e6 * k / one_set))
                make = lambda m, p=protocol: load(p, repeats=m).segments  # noqa: E731
            elif protocol not in STREAMS or (dim == "requests" and protocol not in WITH_REQUESTS):
                cells.append(f"{'-':>{width}}")
                continue
            elif dim == "deltas":
                make = lambda m, p=protocol: stream(p, answer_bytes=20 * m)  # noqa: E731
            else:
                make = lambda m, p=protocol, d=dim: stream(p, **{d: m})  # noqa: E731
            cells.append(f"{doubling(protocol, make, n, args.repeat, args.steps):>{width}}")
        print(f"{protocol:19} " + "".join(cells), flush=True)


if __name__ == "__main__":
    main()
