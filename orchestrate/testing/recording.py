"""Turn the raw log of a real CLI's run into a fixture fit to commit."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson

__all__ = ["SCRATCH_PLACEHOLDER", "scrub_raw_log"]

SCRATCH_PLACEHOLDER = "/scratch"


def scrub_raw_log(src: Path, dst: Path, replacements: dict[str, str]) -> None:
    """Copy a raw log, replacing machine paths (and anything else given) in every chunk and event.

    A path can straddle two chunks of a stream, so each stream is scrubbed as one flow: a chunk's
    last bytes are held back for the stream's next chunk only while they could begin a path (never
    across a newline, so no line completes later relative to the other records than it did).
    Longer keys are replaced first so a path never half-matches.
    """
    pairs = sorted(((k.encode(), v.encode()) for k, v in replacements.items()), key=lambda kv: -len(kv[0]))

    def clean(data: bytes) -> bytes:
        for old, new in pairs:
            data = data.replace(old, new)
        return data

    carry: dict[str, bytes] = {}
    last_ts: dict[str, object] = {}
    out = bytearray()
    for line in src.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec.get("type") != "chunk":
            out += clean(orjson.dumps(rec)) + b"\n"
            continue
        piece = base64.b64decode(rec.pop("b64")) if "b64" in rec else rec.pop("data").encode()
        data = clean(carry.pop(rec["stream"], b"") + piece)
        held = _possible_start(data, [old for old, _ in pairs])
        if held:
            carry[rec["stream"]], data = data[-held:], data[:-held]
        last_ts[rec["stream"]] = rec.get("ts")
        if data:
            out += _chunk_record(rec, data)
    for stream, data in carry.items():
        out += _chunk_record({"type": "chunk", "ts": last_ts.get(stream), "stream": stream}, data)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(bytes(out))


def _possible_start(data: bytes, keys: list[bytes]) -> int:
    """The length of the longest tail of ``data`` (after its last newline) that begins a key."""
    tail = data[data.rfind(b"\n") + 1 :]
    for n in range(min(len(tail), max((len(k) for k in keys), default=1) - 1), 0, -1):
        if any(k.startswith(tail[-n:]) for k in keys):
            return n
    return 0


def _chunk_record(rec: dict[str, object], data: bytes) -> bytes:
    try:
        rec["data"] = data.decode("utf-8")
    except UnicodeDecodeError:
        rec["b64"] = base64.b64encode(data).decode()
    return orjson.dumps(rec) + b"\n"
