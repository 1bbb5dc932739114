"""Record a real CLI's run of a case, and turn its raw log into a fixture fit to commit: no machine
paths, no keys, and the ids that change every run replaced by stable ones."""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from typing import Any

import orjson

from ..registry import default_registry
from ..replay import replay
from ..run import RunResult
from .cases import Case, run_case
from .offline import SCRATCH_PLACEHOLDER, Scratch

__all__ = [
    "FIXTURE_FOLDERS",
    "SCRATCH_PLACEHOLDER",
    "record_case",
    "scrub_raw_log",
    "scrub_scratch_log",
    "write_expected",
]


_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_UUID_TAIL = re.compile(rb"[0-9a-f-]{1,35}$")


class _StableIds:
    """Each distinct UUID becomes ``00000000-0000-4000-8000-<n>``, numbered in the order the agent
    first printed them, then the client: the two pipes interleave differently on every run, each
    alone does not."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.seen: dict[bytes, bytes] = {}
        for stream in ("stdout", "stdin", "stderr", None):
            for rec in records:
                if rec.get("stream") == stream:
                    data = _chunk_data(rec) if rec.get("type") == "chunk" else orjson.dumps(rec)
                    for found in _UUID.finditer(data):
                        self(found)

    def __call__(self, match: re.Match[bytes]) -> bytes:
        found = match.group(0)
        if found.startswith(b"00000000-"):
            return found  # already a placeholder (a case file names it): numbering it would race
        if found not in self.seen:
            self.seen[found] = b"00000000-0000-4000-8000-%012d" % (len(self.seen) + 1)
        return self.seen[found]


def scrub_raw_log(src: Path, dst: Path, replacements: dict[str, str], *, stable_ids: bool = True) -> None:
    """Copy a raw log, replacing machine paths (and anything else given) in every chunk and event.

    A path can straddle two chunks of a stream, so each stream is scrubbed as one flow: a chunk's
    last bytes are held back for the stream's next chunk only while they could begin a path (never
    across a newline, so no line completes later relative to the other records than it did).
    Longer keys are replaced first so a path never half-matches.
    """
    pairs = sorted(((k.encode(), v.encode()) for k, v in replacements.items()), key=lambda kv: -len(kv[0]))

    records = [orjson.loads(line) for line in src.read_bytes().splitlines()]
    ids = _StableIds(records)

    def clean(data: bytes) -> bytes:
        for old, new in pairs:
            data = data.replace(old, new)
        return _UUID.sub(ids, data) if stable_ids else data

    carry: dict[str, bytes] = {}
    last_ts: dict[str, object] = {}
    # A stream's last chunk holds nothing back: held bytes would go after every other record (a
    # prompt written on stdin would come after the answer to it).
    last_chunk = {rec.get("stream"): i for i, rec in enumerate(records) if rec.get("type") == "chunk"}
    out = bytearray()
    for i, rec in enumerate(records):
        if rec.get("type") != "chunk":
            out += clean(orjson.dumps(rec)) + b"\n"
            continue
        piece = _chunk_data(rec)
        rec.pop("b64", None)
        rec.pop("data", None)
        data = clean(carry.pop(rec["stream"], b"") + piece)
        held = (
            _possible_start(data, [old for old, _ in pairs], stable_ids)
            if last_chunk[rec["stream"]] != i
            else 0
        )
        if held:
            carry[rec["stream"]], data = data[-held:], data[:-held]
        last_ts[rec["stream"]] = rec.get("ts")
        if data:
            out += _chunk_record(rec, data)
    for stream, data in carry.items():
        out += _chunk_record({"type": "chunk", "ts": last_ts.get(stream), "stream": stream}, data)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(bytes(out))


def _possible_start(data: bytes, keys: list[bytes], ids: bool) -> int:
    """The length of the longest tail of ``data`` (after its last newline) that begins a key (or,
    with ``ids``, a UUID)."""
    tail = data[data.rfind(b"\n") + 1 :]
    held = 0
    for n in range(min(len(tail), max((len(k) for k in keys), default=1) - 1), 0, -1):
        if any(k.startswith(tail[-n:]) for k in keys):
            held = n
            break
    if ids and (m := _UUID_TAIL.search(tail)):
        held = max(held, len(m.group(0)))
    return held


def _chunk_data(rec: dict[str, Any]) -> bytes:
    return base64.b64decode(rec["b64"]) if "b64" in rec else str(rec["data"]).encode()


def _chunk_record(rec: dict[str, object], data: bytes) -> bytes:
    try:
        rec["data"] = data.decode("utf-8")
    except UnicodeDecodeError:
        rec["b64"] = base64.b64encode(data).decode()
    return orjson.dumps(rec) + b"\n"


# Where each executor's golden fixtures live: one folder per wire protocol (and agent, for ACP).
FIXTURE_FOLDERS = {
    "cursor": "cursor-jsonl",
    "claude-code": "claude-stream-json",
    "codex": "codex-app-server",
    "codex-exec": "codex-exec",
    "gemini": "acp-gemini",
    "qwen": "acp-qwen",
}


async def record_case(
    executor: str,
    scenario: Path,
    out: Path,
    *,
    project: Path | None = None,
    base_command: list[str] | None = None,
) -> RunResult:
    """Run ``scenario`` (a case file) with the real CLI in a scratch home against the scripted server
    and write ``out`` (the scrubbed raw log) and ``out``'s ``.entries.json`` (the normalized entries)."""
    with Scratch.create() as scratch:
        raw = scratch.root / "raw.jsonl"
        case = Case.load(scenario)
        if base_command is not None:
            case.options = {**case.options, "base_command": base_command}
        result = await run_case(executor, case, scratch, raw)
        scrub_scratch_log(raw, out, scratch, project)
    write_expected(executor, out)
    return result


def scrub_scratch_log(raw: Path, out: Path, scratch: Scratch, project: Path | None = None) -> None:
    """The raw log of a run in ``scratch``, fit to commit as ``out`` (see :func:`scrub_raw_log`)."""
    binary = orjson.loads(raw.read_bytes().splitlines()[0])["argv"][0]
    replacements = {
        str(scratch.root): SCRATCH_PLACEHOLDER,
        # the scratch dir's own random name, where a CLI shows a path relative to a parent
        scratch.root.name: SCRATCH_PLACEHOLDER.strip("/"),
        str(Path(binary).parent): "/bin",
        str(Path.home()): "/home",
    }
    if project is not None:
        replacements[os.path.realpath(project)] = "/project"
    real = os.path.realpath(binary)  # the pinned CLIs' checkout, wherever this one is
    if "/clis/node_modules/" in real:
        replacements.setdefault(real.split("/clis/node_modules/")[0], "/project")
    scrub_raw_log(raw, out, replacements)


def write_expected(executor: str, fixture: Path) -> list[dict[str, Any]]:
    """Replay ``fixture`` through the executor's normalizer and write what it gives, for review."""
    normalizer = default_registry.create(executor).create_normalizer()
    list(replay(fixture, normalizer))
    entries = [e.to_json_dict() for e in normalizer.entries]
    fixture.with_suffix(".entries.json").write_bytes(
        orjson.dumps(entries, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    )
    return entries
