"""The other machine formats of the ACP agents, replayed from captures of the real CLIs (stdout of
`opencode run --format json`, `copilot -p --output-format json`, `droid exec -o stream-json`,
`gemini -p -o stream-json`, against the scripted model server): golden entries, the same entries
however the bytes are cut, the published schema, and each executor picking the format a capture
is in."""

from __future__ import annotations

import random
import re

import jsonschema
import orjson
import pytest

from orchestrate import get_executor
from orchestrate.entries import CommandRun, EntryPatch, FileEdit, ToolUse, entry_json_schema
from orchestrate.normalizers.acp import AcpNormalizer
from orchestrate.normalizers.base import Normalizer
from orchestrate.normalizers.copilot_jsonl import CopilotNormalizer
from orchestrate.normalizers.droid_jsonl import DroidNormalizer
from orchestrate.normalizers.gemini_stream_json import GeminiStreamJsonNormalizer
from orchestrate.normalizers.opencode_jsonl import OpenCodeRunNormalizer
from orchestrate.replay import replay

from .helpers import FIXTURES

FORMATS = {
    "opencode-run-json": ("opencode", OpenCodeRunNormalizer),
    "copilot-json": ("copilot", CopilotNormalizer),
    "droid-stream-json": ("droid", DroidNormalizer),
    "gemini-stream-json": ("gemini", GeminiStreamJsonNormalizer),
}
CASES = sorted((folder, p.stem) for folder in FORMATS for p in (FIXTURES / folder).glob("*.jsonl"))
IDS = [f"{folder}/{case}" for folder, case in CASES]


def normalizer_for(folder: str, case: str) -> Normalizer:
    executor, cls = FORMATS[folder]
    first = (FIXTURES / folder / f"{case}.jsonl").read_bytes().splitlines()[0]
    normalizer = get_executor(executor).capture_normalizer(first)
    assert type(normalizer) is cls  # the executor tells its formats apart by the first line
    return normalizer


def test_every_format_has_fixtures_and_expectations() -> None:
    for folder in FORMATS:
        fixtures = list((FIXTURES / folder).glob("*.jsonl"))
        assert len(fixtures) >= 4, folder
        for fixture in fixtures:
            assert fixture.with_suffix(".entries.json").exists(), fixture.name
            text = fixture.read_text()
            assert not re.search(r"(?<![\w./-])/(tmp|root)/", text), fixture.name
            assert str(FIXTURES.parent) not in text and "scripted-key" not in text, fixture.name


@pytest.mark.parametrize(("folder", "case"), CASES, ids=IDS)
def test_golden(folder: str, case: str) -> None:
    expected = orjson.loads((FIXTURES / folder / f"{case}.entries.json").read_bytes())
    normalizer = normalizer_for(folder, case)
    list(replay(FIXTURES / folder / f"{case}.jsonl", normalizer))
    assert [e.to_json_dict() for e in normalizer.entries] == expected


def _feed(folder: str, case: str, rng: random.Random | None) -> list[EntryPatch]:
    data = (FIXTURES / folder / f"{case}.jsonl").read_bytes()
    normalizer = normalizer_for(folder, case)
    patches: list[EntryPatch] = []
    pos = 0
    while pos < len(data):
        step = len(data) if rng is None else rng.randint(1, 64)
        patches += normalizer.feed(data[pos : pos + step], "stdout")
        pos += step
    patches += normalizer.finish()
    return patches


def _applied(patches: list[EntryPatch]) -> list[dict[str, object]]:
    entries: list[dict[str, object]] = []
    for patch in patches:
        if patch.op == "add":
            assert patch.index == len(entries)
            entries.append(patch.entry.to_json_dict())
        else:
            entries[patch.index] = patch.entry.to_json_dict()
    return entries


@pytest.mark.parametrize(("folder", "case"), CASES, ids=IDS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_entries_whatever_the_chunks(folder: str, case: str, seed: int) -> None:
    strip = lambda entries: [{k: v for k, v in e.items() if k != "timestamp"} for e in entries]  # noqa: E731
    whole = strip(_applied(_feed(folder, case, None)))
    assert strip(_applied(_feed(folder, case, random.Random(seed)))) == whole


def test_every_patch_validates_against_the_published_schema() -> None:
    validator = jsonschema.Draft202012Validator(entry_json_schema())
    for folder, case in CASES:
        for patch in _feed(folder, case, None):
            validator.validate(patch.to_json_dict())


@pytest.mark.parametrize(
    ("folder", "case"),
    [
        ("opencode-run-json", "tool_auto"),
        ("copilot-json", "tool_allowed"),
        ("droid-stream-json", "tool"),
        ("gemini-stream-json", "tool_yolo"),
    ],
)
def test_one_command_looks_the_same_from_every_cli(folder: str, case: str) -> None:
    normalizer = normalizer_for(folder, case)
    list(replay(FIXTURES / folder / f"{case}.jsonl", normalizer))
    [tool] = [e.type.tool for e in normalizer.entries if isinstance(e.type, ToolUse)]
    assert tool.status == "success" and isinstance(tool.action, CommandRun)
    assert tool.action.command == "touch made.txt && echo created"
    assert tool.action.result is not None and "created" in (tool.action.result.stdout or "")
    assert normalizer.outcome == "success"


@pytest.mark.parametrize("folder", list(FORMATS))
def test_one_edit_looks_the_same_from_every_cli(folder: str) -> None:
    normalizer = normalizer_for(folder, "edit")
    list(replay(FIXTURES / folder / "edit.jsonl", normalizer))
    tools = [e.type.tool for e in normalizer.entries if isinstance(e.type, ToolUse)]
    [edit] = [t for t in tools if isinstance(t.action, FileEdit)]
    assert edit.status == "success" and edit.action.path.endswith("notes.txt")
    assert "-beta\n+BETA" in (edit.action.changes[0].unified_diff or "")


@pytest.mark.parametrize(
    ("folder", "case"),
    [("opencode-run-json", "tool_rejected"), ("copilot-json", "tool_denied")],
)
def test_a_refusal_the_cli_made_for_nobody_to_ask_is_denied(folder: str, case: str) -> None:
    normalizer = normalizer_for(folder, case)
    list(replay(FIXTURES / folder / f"{case}.jsonl", normalizer))
    [tool] = [e.type.tool for e in normalizer.entries if isinstance(e.type, ToolUse)]
    assert tool.status == "denied" and tool.result is not None and tool.result.error


@pytest.mark.parametrize("folder", ["copilot-json", "droid-stream-json", "gemini-stream-json"])
def test_a_model_error_fails_the_turn_once(folder: str) -> None:
    normalizer = normalizer_for(folder, "model_error")
    list(replay(FIXTURES / folder / "model_error.jsonl", normalizer))
    assert normalizer.turn_statuses == ["failed"] and normalizer.outcome == "failed"
    assert any(e.type.kind == "error" and "scripted bad request" in e.content for e in normalizer.entries)


def test_copilot_deltas_then_the_whole_message_are_shown_once() -> None:
    normalizer = normalizer_for("copilot-json", "plain")
    list(replay(FIXTURES / "copilot-json" / "plain.jsonl", normalizer))
    assert [e.content for e in normalizer.entries if e.type.kind == "assistant_message"] == [
        "Hello from the scripted model."
    ]


def test_acp_captures_still_go_to_the_acp_normalizer() -> None:
    line = b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}'
    for executor in ("opencode", "copilot", "droid", "gemini"):
        assert isinstance(get_executor(executor).capture_normalizer(line), AcpNormalizer)


def test_garbage_lines_are_entries_not_exceptions() -> None:
    for _, cls in FORMATS.values():
        normalizer = cls()
        normalizer.feed(b'not json\n{"type": 5}\n[1,2]\n{"type":"tool_use","part":7}\n', "stdout")
        normalizer.finish()
        assert any(e.type.kind == "error" for e in normalizer.entries), cls.__name__
