"""How fast each protocol's normalizer turns real captures into entries, as a multiple of the floor.

The floor (baseline) is what any consumer must do anyway: split the same bytes into lines and
orjson-parse each one, in this process, in this run.  Input: every fixture of the protocol
(recorded from the real CLIs) repeated to ``--mb`` megabytes, fed whole (each stream's bytes as
one piece between the client's writes) and in 64 KiB pieces (what a pipe read gives); then one
synthetic answer of 1 MB and 5 MB streamed in 20-byte deltas (the text-growth check).  Rounds
alternate floor and normalizer, best of ``--repeat``, so a busy machine slows both alike.

``--clock cpu`` times with this process's CPU time instead of the wall clock: on a machine shared
with other work, time spent waiting for a core then counts for neither side.

Whether the normalizers are the pure modules or a build compiled with mypyc (setup.py,
``ORCHESTRATE_MYPYC=1``) is printed first; ``--require-compiled`` refuses to run on pure ones.

``--decompose`` also runs each protocol's fixtures with its line handler replaced, to show where
the time goes: ``bare`` (not our code: the least a normalizer written in Python could do per
line on top of the floor, see ``corpus.bare``), ``wire`` (the handler does nothing: what is left
is the wire's framing and its one parse per line, the normalizer's creation and ``finish``,
notes, drains), ``1 entry`` (it adds one plain entry per line, so one entry model and one patch
per line), then ``full``, and ``no patch``: the full path with each patch a plain tuple instead
of its ``EntryPatch`` model (what a lazy patch could save at most on the patch object itself; the
pure modules only: a compiled module's functions cannot be swapped).  The handlers run strict,
so a stage whose handler no longer fits the normalizer fails loudly instead of timing the error
entries it would make.

    python bench/normalizer_throughput.py [--mb 10] [--repeat 5] [--answers 1,5] [--protocol NAME]
                                          [--decompose] [--clock wall|cpu] [--require-compiled]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus as corpus_module
from corpus import PIPE_CHUNK, PROTOCOLS, Corpus, Segment, bare, chunks, floor, load, normalize, normalizer
from synthetic import STREAMS, stream

import orchestrate.normalizers.base as log_module
from orchestrate.normalizers.kinds import SYSTEM
from orchestrate.wire.lines import WireLine

Handler = Callable[[Any, WireLine], None]


def _wire(self: Any, line: WireLine) -> None:
    pass


def _one_entry(self: Any, line: WireLine) -> None:
    self.log.add(SYSTEM, "", line.ts)


def _tuple_patch(op: str, index: int, entry: Any) -> tuple[str, int, Any]:
    return (op, index, entry)


_STRICT: dict[type, type] = {}


def _strict(n: Any) -> Any:
    # Strict: a stage whose handler no longer fits the normalizer fails loudly instead of timing
    # the error entries it would make.  Set by the class, not on the instance: one attribute more
    # made an ACP normalizer's __dict__ stop sharing its class's keys, +2 % of Gemini's "full"
    # (gemini22), which the real normalizer does not pay.
    cls = type(n)
    strict = _STRICT.get(cls)
    if strict is None:
        strict = _STRICT[cls] = type(f"{cls.__name__}Strict", (cls,), {"strict": True})
    try:
        n.__class__ = strict
    except TypeError:  # (a class compiled with mypyc: its instance keeps its class)
        n.strict = True
    return n


STAGES: list[tuple[str, Handler | None]] = [
    ("wire", _wire),
    ("1 entry", _one_entry),
    ("full", None),
]


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter


def ratio(
    protocol: str, pieces: list[Segment], repeat: int, work: Callable[[], object] | None = None
) -> tuple[float, float]:
    """(floor seconds, normalizer seconds), each the best of ``repeat`` alternating rounds (or
    ``work``'s seconds in place of the normalizer's)."""
    best_floor = best_norm = float("inf")
    for _ in range(repeat):
        start = clock()
        floor(pieces)
        best_floor = min(best_floor, clock() - start)
        start = clock()
        if work is None:
            normalize(protocol, pieces)
        else:
            work()
        best_norm = min(best_norm, clock() - start)
    return best_floor, best_norm


def report(label: str, corpus: Corpus, repeat: int) -> None:
    cells = []
    for name, size in (("whole", None), ("64KiB", PIPE_CHUNK)):
        f, n = ratio(corpus.protocol, list(chunks(corpus, size)), repeat)
        cells.append(f"{name} {n / f:5.2f}x ({corpus.size / 1e6 / n:6.1f} MB/s)")
    print(f"{corpus.protocol:19} {label:16} {corpus.size / 1e6:6.1f} MB  " + "   ".join(cells), flush=True)


def decompose(corpus: Corpus, repeat: int) -> None:
    """The fixtures through the normalizer with its line handler replaced by each stage's: a
    subclass whose ``feed_line`` is the stage's handler (a subclass, not the class changed in
    place: a class compiled with mypyc cannot be changed, but it can be subclassed)."""
    cls = type(normalizer(corpus.protocol))
    pieces = list(chunks(corpus, None))
    f, n = ratio(corpus.protocol, pieces, repeat, lambda: bare(pieces))
    cells = [f"bare {n / f:5.2f}x"]
    made = corpus_module.normalizer
    try:
        for label, handler in STAGES:
            if handler is None:
                corpus_module.normalizer = lambda protocol: _strict(made(protocol))
            else:
                stage = type(f"{cls.__name__}Stage", (cls,), {"feed_line": handler})
                corpus_module.normalizer = lambda _protocol, stage=stage: _strict(stage())
            f, n = ratio(corpus.protocol, pieces, repeat)
            cells.append(f"{label} {n / f:5.2f}x")
        if not compiled():
            corpus_module.normalizer = lambda protocol: _strict(made(protocol))
            real_patch = log_module._patch
            log_module._patch = _tuple_patch  # type: ignore[assignment]
            try:
                f, n = ratio(corpus.protocol, pieces, repeat)
            finally:
                log_module._patch = real_patch
            cells.append(f"no patch {n / f:5.2f}x")
    finally:
        corpus_module.normalizer = made
    size = f"{corpus.size / 1e6:6.1f} MB"
    print(f"{corpus.protocol:19} {'decomposed':16} {size}  " + "   ".join(cells), flush=True)


def compiled() -> list[str]:
    """The hot modules imported compiled (a mypyc build: setup.py with ORCHESTRATE_MYPYC=1)."""
    import orchestrate.normalizers.base
    import orchestrate.wire.lines

    modules = [orchestrate.normalizers.base, orchestrate.wire.lines]
    return [m.__name__ for m in modules if not (m.__file__ or "").endswith(".py")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=10.0, help="size of the fixture corpus per protocol")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--answers", default="1,5", help="synthetic answer sizes in MB ('' for none)")
    parser.add_argument("--protocol", action="append", choices=sorted(PROTOCOLS))
    parser.add_argument("--decompose", action="store_true", help="where the time goes, per protocol")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="cpu: this process's CPU time, steadier than wall time on a machine shared with other work",
    )
    parser.add_argument(
        "--require-compiled",
        action="store_true",
        help="refuse to run unless the normalizers imported are the ones compiled with mypyc (setup.py)",
    )
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    protocols = args.protocol or list(PROTOCOLS)
    built = compiled()
    if args.require_compiled and not built:
        parser.error(
            "the normalizers imported are pure Python: build them with setup.py (ORCHESTRATE_MYPYC=1)"
        )
    print(f"normalizers: {'compiled with mypyc: ' + ', '.join(built) if built else 'pure Python'}")
    print("time as a multiple of the floor (split lines + orjson.loads each); lower is better")
    for protocol in protocols:
        corpus = load(protocol, int(args.mb * 1e6))
        report("fixtures", corpus, args.repeat)
        if args.decompose:
            decompose(corpus, args.repeat)
    for mb in [float(x) for x in args.answers.split(",") if x]:
        for protocol in protocols:
            if protocol in STREAMS:
                segments = stream(protocol, answer_bytes=int(mb * 1e6))
                report(f"{mb:g} MB answer", Corpus(protocol, segments), max(1, args.repeat // 2))


if __name__ == "__main__":
    main()
