"""Turn the raw log of a real CLI's run into a fixture fit to commit."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson

__all__ = ["SCRATCH_PLACEHOLDER", "scrub_raw_log"]

SCRATCH_PLACEHOLDER = "/scratch"


def scrub_raw_log(src: Path, dst: Path, replacements: dict[str, str]) -> None:
    """Copy a raw log, replacing machine paths (and anything else given) in every record.

    A path can straddle two chunks, so the pieces of a line are joined first and written where the
    line completes: for a line protocol nothing changes, since no line completes any earlier or
    later relative to the other records.  Longer keys are replaced first so a path never half-matches.
    """
    pairs = sorted(replacements.items(), key=lambda kv: -len(kv[0]))

    def clean(data: bytes) -> bytes:
        for old, new in pairs:
            data = data.replace(old.encode(), new.encode())
        return data

    pending: dict[str, bytearray] = {}
    out = bytearray()
    for line in src.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec.get("type") != "chunk":
            out += clean(orjson.dumps(rec)) + b"\n"
            continue
        piece = base64.b64decode(rec.pop("b64")) if "b64" in rec else rec.pop("data").encode()
        buf = pending.setdefault(rec["stream"], bytearray())
        buf += piece
        if buf.endswith(b"\n"):
            out += _chunk_record(rec, clean(bytes(buf)))
            buf.clear()
    for stream, buf in pending.items():
        if buf:
            out += _chunk_record({"type": "chunk", "ts": None, "stream": stream}, clean(bytes(buf)))
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(bytes(out))


def _chunk_record(rec: dict[str, object], data: bytes) -> bytes:
    try:
        rec["data"] = data.decode("utf-8")
    except UnicodeDecodeError:
        rec["b64"] = base64.b64encode(data).decode()
    return orjson.dumps(rec) + b"\n"
