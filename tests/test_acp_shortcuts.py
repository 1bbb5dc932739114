"""The ACP normalizer's shortcuts give what its general path gives.

A tool call update that makes the same file or search action again leaves the entry's shaped action
and content as they are (``AcpNormalizer._note_shaped``); the models made per line are built
without their constructors.  These tests hold both to the general path: random runs of tool calls,
their updates, permission questions and answers, with the working directory arriving before or
after them, give the same patches with the shortcut as without it, and every model in every patch
is the one the validating constructors make from its JSON form.  tests/test_patch_stream.py pins
the fixtures' whole patch streams besides.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from orchestrate.entries import ActionType, EntryPatch, NormalizedEntry
from orchestrate.normalizers.acp import AcpNormalizer
from orchestrate.process.rawlog import read_raw_log

from .test_golden import FIXTURES


class _General(AcpNormalizer):
    """The normalizer with the shortcut off: every update's action is given to the log."""

    def _note_shaped(self, tool_id: str, action: ActionType) -> None:
        pass


_PATHS = ["/w/a.txt", "/w/sub/b.txt", "/elsewhere/c.txt", "/w", "/w/w/d.txt"]
_TEXTS = ["", "one\n", "one\ntwo\n", "/w/a.txt\n"]


def _diff() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "type": st.just("diff"),
            "path": st.sampled_from(_PATHS),
            "oldText": st.sampled_from([*_TEXTS, None]),
            "newText": st.sampled_from(_TEXTS),
        },
        optional={"_meta": st.sampled_from([{"kind": "add"}, {"kind": "delete"}, {"kind": "modify"}])},
    )


_CONTENT = st.lists(
    st.one_of(
        _diff(),
        st.builds(
            lambda t: {"type": "content", "content": {"type": "text", "text": t}}, st.sampled_from(_TEXTS)
        ),
    ),
    max_size=2,
)

_CALL = st.fixed_dictionaries(
    {"toolCallId": st.sampled_from(["t1", "t2", "read_file__read_file_1_0"])},
    optional={
        "kind": st.sampled_from(["read", "edit", "delete", "search", "execute", "fetch", "other"]),
        "title": st.sampled_from(["", "Read", "a.txt: one => two", "ls /w"]),
        "status": st.sampled_from(["pending", "in_progress", "completed", "failed"]),
        "locations": st.lists(st.builds(lambda p: {"path": p}, st.sampled_from(_PATHS)), max_size=2),
        "content": _CONTENT,
        "rawInput": st.fixed_dictionaries(
            {}, optional={"path": st.sampled_from(_PATHS), "pattern": st.sampled_from(["x", "y"])}
        ),
    },
)


def _update(call: dict[str, Any], first: bool) -> dict[str, Any]:
    kind = "tool_call" if first else "tool_call_update"
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"update": {"sessionUpdate": kind, **call}},
    }


_STEP = st.one_of(
    st.tuples(st.just("update"), _CALL, st.booleans()),
    st.tuples(st.just("ask"), _CALL, st.integers(0, 2)),
    st.tuples(st.just("answer"), st.integers(0, 2), st.sampled_from(["proceed_once", "cancel"])),
    st.tuples(st.just("session"), st.sampled_from(["/w", "/w/sub", "/elsewhere"]), st.integers(10, 12)),
)


def _lines(steps: list[tuple[Any, ...]]) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for step in steps:
        match step:
            case ("update", call, first):
                out.append(("stdout", orjson.dumps(_update(call, first))))
            case ("ask", call, request_id):
                options = [
                    {"optionId": "proceed_once", "kind": "allow_once"},
                    {"optionId": "cancel", "kind": "reject_once"},
                ]
                params = {"toolCall": call, "options": options}
                message = {"jsonrpc": "2.0", "id": request_id, "method": "session/request_permission"}
                out.append(("stdout", orjson.dumps({**message, "params": params})))
            case ("answer", request_id, option):
                result = {"outcome": {"outcome": "selected", "optionId": option}}
                out.append(("stdin", orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})))
            case ("session", cwd, request_id):
                new = {"jsonrpc": "2.0", "id": request_id, "method": "session/new", "params": {"cwd": cwd}}
                out.append(("stdin", orjson.dumps(new)))
                answer = {"jsonrpc": "2.0", "id": request_id, "result": {"sessionId": "s"}}
                out.append(("stdout", orjson.dumps(answer)))
    return out


def _patches(n: AcpNormalizer, lines: list[tuple[str, bytes]], together: bool) -> list[Any]:
    n.strict = True  # (a programming error is one, not an entry)
    patches: list[EntryPatch] = []
    if together:  # one feed per stream's run of lines: several updates of a call between drains
        i = 0
        while i < len(lines):
            j = i
            while j < len(lines) and lines[j][0] == lines[i][0]:
                j += 1
            patches += n.feed(b"".join(line + b"\n" for _, line in lines[i:j]), lines[i][0])  # type: ignore[arg-type]
            i = j
    else:
        for stream, line in lines:
            patches += n.feed(line + b"\n", stream)  # type: ignore[arg-type]
    patches += n.finish()
    return [p.model_dump(mode="json", by_alias=True) for p in patches]


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(_STEP, max_size=12), work_dir=st.sampled_from([None, "/w"]), together=st.booleans())
def test_an_update_making_the_same_action_gives_the_general_paths_patches(
    steps: list[tuple[Any, ...]], work_dir: str | None, together: bool
) -> None:
    lines = _lines(steps)
    fast, general = AcpNormalizer(), _General()
    fast.work_dir = general.work_dir = work_dir
    assert _patches(fast, lines, together) == _patches(general, lines, together)


def test_the_shortcut_is_taken() -> None:
    # (else the test above compares the general path with itself)
    call = {"toolCallId": "t1", "kind": "edit", "locations": [{"path": "/w/a.txt"}], "content": []}
    n = AcpNormalizer()
    n.work_dir = "/w"
    n.feed(orjson.dumps(_update(call, True)) + b"\n")
    assert "t1" in n._shaped
    shaped = n.log.tool(0)
    n.feed(orjson.dumps(_update({**call, "status": "completed"}, False)) + b"\n")
    tool = n.log.tool(0)
    assert tool is not None and shaped is not None
    assert tool.status == "success"
    assert tool.action is shaped.action  # the entry's own, not made and shaped again


def _validated(model: Any) -> None:
    """``model`` and every model inside it are what their validating constructors make."""
    if isinstance(model, BaseModel):
        again = type(model).model_validate(model.model_dump())
        assert again == model
        assert list(again.__dict__) == list(model.__dict__)  # (every field, in the model's order)
        assert again.model_dump_json(by_alias=True) == model.model_dump_json(by_alias=True)
        for value in model.__dict__.values():
            _validated(value)
    elif isinstance(model, tuple | list):
        for value in model:
            _validated(value)


def test_every_model_built_is_the_validated_one() -> None:
    fixtures = sorted((FIXTURES / "acp-gemini").glob("*.jsonl")) + sorted(
        (FIXTURES / "acp-qwen").glob("*.jsonl")
    )
    assert fixtures
    for path in fixtures:
        n = AcpNormalizer()
        n.strict = True
        for record in read_raw_log(path)[1]:
            if record.event is not None:
                patches = n.note(record.event)
            elif record.stream is not None:
                patches = n.feed(record.data, record.stream)  # type: ignore[arg-type]
            else:
                continue
            for patch in patches:
                _validated(patch.entry.type)
                assert isinstance(patch.entry, NormalizedEntry)
