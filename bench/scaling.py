"""Does doubling one input dimension double the time?  For every protocol and every dimension:

- bytes: the fixtures (real captures) repeated n and 2n times (n: about 1 MB per protocol), fed to
  one normalizer (a session that goes on);
- deltas: one streamed answer of n and 2n 20-byte deltas;
- tools: n and 2n tool calls, each started and finished;
- lines: n and 2n lines that change nothing (the per-line floor of the protocol);
- requests: n and 2n permission requests, each noted and answered (where the protocol asks).

Prints time(2x) / time(x): about 2 is linear, 4 is quadratic.  Best of ``--repeat`` runs each.

    python bench/scaling.py [--scale 1.0] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import PROTOCOLS, Segment, best_of, load, normalize
from synthetic import STREAMS, WITH_REQUESTS, stream


def doubling(protocol: str, make: object, n: int, repeat: int) -> float:
    assert callable(make)
    one: list[Segment] = make(n)
    two: list[Segment] = make(2 * n)
    t1 = best_of(lambda: normalize(protocol, one, one_session=True), repeat)
    t2 = best_of(lambda: normalize(protocol, two, one_session=True), repeat)
    return t2 / t1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every base size")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    k = args.scale
    base = {"bytes": 0, "deltas": int(50_000 * k), "tools": int(5_000 * k)}
    base |= {"lines": int(100_000 * k), "requests": int(5_000 * k)}
    print("time(2x) / time(x) per input dimension: ~2 linear, ~4 quadratic")
    print(f"{'':19} " + "".join(f"{d:>10}" for d in base))
    for protocol in PROTOCOLS:
        cells = []
        for dim, n in base.items():
            if dim == "bytes":
                one_set = load(protocol, repeats=1).size
                n = max(1, int(1e6 * k / one_set))
                make = lambda m, p=protocol: load(p, repeats=m).segments  # noqa: E731
            elif protocol not in STREAMS or (dim == "requests" and protocol not in WITH_REQUESTS):
                cells.append(f"{'-':>10}")
                continue
            elif dim == "deltas":
                make = lambda m, p=protocol: stream(p, answer_bytes=20 * m)  # noqa: E731
            else:
                make = lambda m, p=protocol, d=dim: stream(p, **{d: m})  # noqa: E731
            cells.append(f"{doubling(protocol, make, n, args.repeat):10.2f}")
        print(f"{protocol:19} " + "".join(cells), flush=True)


if __name__ == "__main__":
    main()
