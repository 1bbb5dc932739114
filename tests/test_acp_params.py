"""orchestrate/run/acp_params.py against the ACP SDK it mirrors (the SDK is the oracle here, and only
here): the same JSON schema, and the same result or the same refusal for every agent request of the
fixtures and for generated ones (a value of any type put anywhere, a key taken away, a field by its
Python name); and an ACP run that never loads the SDK's 273 models."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from acp import schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from orchestrate.peers.acp_opening import INITIALIZE
from orchestrate.run import acp_params

from .test_acp_schema import messages

PAIRS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "session/request_permission": (acp_params.RequestPermissionRequest, schema.RequestPermissionRequest),
    "fs/read_text_file": (acp_params.ReadTextFileRequest, schema.ReadTextFileRequest),
    "fs/write_text_file": (acp_params.WriteTextFileRequest, schema.WriteTextFileRequest),
    "terminal/create": (acp_params.CreateTerminalRequest, schema.CreateTerminalRequest),
}
FOLDERS = ["acp-gemini", "acp-qwen", "conformance/gemini", "conformance/qwen", "conformance/droid"]


def _bare(node: Any) -> Any:
    """A JSON schema without what only documents it (descriptions, titles)."""
    if isinstance(node, dict):
        return {k: _bare(v) for k, v in node.items() if k not in ("description", "title")}
    if isinstance(node, list):
        return [_bare(v) for v in node]
    return node


def _requests() -> list[tuple[str, Any]]:
    found = []
    for folder in FOLDERS:
        for message in messages(folder, "stdout"):
            if message.get("method") in PAIRS and "id" in message:
                found.append((message["method"], message.get("params")))
    return found


# Every model and field the four requests reach, each list with more than one item: the recorded
# traffic uses only some of them.
_ANNOTATIONS = {"audience": ["user"], "lastModified": "2026-01-01", "priority": 0.5, "_meta": {"a": 1}}
_BLOCKS = [
    {"type": "text", "text": "t", "annotations": _ANNOTATIONS, "_meta": {}},
    {"type": "image", "data": "aGk=", "mimeType": "image/png", "uri": "file:///i.png"},
    {"type": "audio", "data": "aGk=", "mimeType": "audio/wav", "annotations": _ANNOTATIONS},
    {
        "type": "resource_link",
        "name": "n",
        "uri": "file:///r",
        "description": "d",
        "mimeType": "text/plain",
        "size": 3,
        "title": "r",
    },
    {"type": "resource", "resource": {"uri": "file:///r", "text": "x", "mimeType": "text/plain"}},
    {"type": "resource", "resource": {"uri": "file:///b", "blob": "aGk="}, "annotations": _ANNOTATIONS},
]
RICH: list[tuple[str, Any]] = [
    (
        "session/request_permission",
        {
            "sessionId": "s",
            "toolCall": {
                "toolCallId": "c1",
                "kind": "edit",
                "status": "pending",
                "title": "Edit a.py",
                "content": [
                    *({"type": "content", "content": block} for block in _BLOCKS),
                    {"type": "diff", "path": "/w/a.py", "oldText": "a", "newText": "b", "_meta": {}},
                    {"type": "terminal", "terminalId": "t1"},
                ],
                "locations": [{"path": "/w/a.py", "line": 3}, {"path": "/w/b.py"}],
                "rawInput": {"file_path": "/w/a.py"},
                "rawOutput": [1, "two"],
                "_meta": {"toolName": "edit"},
            },
            "options": [
                {"optionId": "o1", "name": "Allow", "kind": "allow_once"},
                {"optionId": "o2", "name": "Always", "kind": "allow_always", "_meta": {}},
                {"optionId": "o3", "name": "Reject", "kind": "reject_once"},
                {"optionId": "o4", "name": "Never", "kind": "reject_always"},
            ],
            "_meta": {"m": True},
        },
    ),
    ("fs/read_text_file", {"sessionId": "s", "path": "/w/a.py", "line": 2, "limit": 10, "_meta": {}}),
    ("fs/write_text_file", {"sessionId": "s", "path": "/w/a.py", "content": "x", "_meta": {}}),
    (
        "terminal/create",
        {
            "sessionId": "s",
            "command": "ls",
            "args": ["-l", "-a"],
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2", "_meta": {}}],
            "cwd": "/w",
            "outputByteLimit": 100,
            "_meta": {},
        },
    ),
]
REQUESTS = _requests() + RICH


def _typed(node: Any) -> Any:
    """``node`` with every leaf's type beside its value, and each dict's keys in their order: ``==``
    alone holds True, 1 and 1.0 equal, and two dicts equal whatever their order (fields declared in
    another order dump in another: the approval request's ``tool_input``, the stored JSON)."""
    if isinstance(node, dict):
        return ("dict", [(key, _typed(value)) for key, value in node.items()])
    if isinstance(node, list | tuple):
        return (type(node).__name__, [_typed(value) for value in node])
    return (type(node).__name__, repr(node))


def _outcome(model: type[BaseModel], params: Any) -> tuple[str, Any]:
    """What the driver gets: the model's dumps (JSON and Python, typed), or the refusal's text,
    which goes back to the agent in the error (run/acp.py ``_params``)."""
    try:
        made = model.model_validate(params)
    except ValidationError as exc:
        return ("refused", str(exc))
    return ("read", _typed((made.model_dump(mode="json", by_alias=True), made.model_dump())))


def test_the_fixtures_hold_every_request_we_mirror() -> None:
    # The differential tests below are only as good as what they start from.
    assert {method for method, _ in REQUESTS} >= {
        "session/request_permission",
        "fs/read_text_file",
        "fs/write_text_file",
    }
    assert len(REQUESTS) >= 10


@pytest.mark.parametrize("method", sorted(PAIRS))
def test_the_same_json_schema_as_the_sdk(method: str) -> None:
    ours, theirs = PAIRS[method]
    assert _bare(ours.model_json_schema()) == _bare(theirs.model_json_schema())


def test_every_recorded_request_reads_the_same() -> None:
    for method, params in REQUESTS:
        ours, theirs = PAIRS[method]
        assert _outcome(ours, params) == _outcome(theirs, params), (method, params)
        assert _outcome(ours, params)[0] == "read"


# What a hostile agent's JSON can hold that random values rarely hit: ints past 64 bits, floats and
# strings for ints, bools, NUL, a lone surrogate (json.loads makes one from "\\ud800"), other digits.
_EDGES = st.sampled_from(
    [
        2**63,
        -(2**63) - 1,
        10**300,
        3.0,
        -0.0,
        1e308,
        float("inf"),
        "3",
        " 3",
        "1e3",
        "\u0663",
        "",
        "\x00",
        "a\x00b",
        "\ud800",
        True,
        False,
        "null",
        -1,
        0,
        1.5,
    ]
)
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | _EDGES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
_NAMES = [
    "toolCall",
    "toolCallId",
    "content",
    "type",
    "newText",
    "oldText",
    "path",
    "line",
    "limit",
    "options",
    "optionId",
    "kind",
    "status",
    "title",
    "locations",
    "rawInput",
    "annotations",
    "resource",
    "mimeType",
    "env",
    "args",
    "cwd",
    "outputByteLimit",
    "_meta",
    "sessionId",
    "session_id",
    "tool_call",
    "new_text",
    "option_id",
    "terminalId",
    "uri",
    "text",
    "name",
    "value",
]


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*at, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*at, index))
    return found


def _changed(node: Any, path: tuple[Any, ...], change: str, value: Any, key: str) -> Any:
    if not path:
        if change == "add" and isinstance(node, dict):
            return {**node, key: value}
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        copy = dict(node)
        if not rest and change == "drop":
            copy.pop(head, None)
        else:
            copy[head] = _changed(node[head], rest, change, value, key)
        return copy
    copy_list = list(node)
    if not rest and change == "drop":
        copy_list.pop(head)
    else:
        copy_list[head] = _changed(node[head], rest, change, value, key)
    return copy_list


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_change_to_a_request_reads_the_same(data: st.DataObject) -> None:
    method, params = data.draw(st.sampled_from(REQUESTS))
    path = data.draw(st.sampled_from(_paths(params)))
    change = data.draw(st.sampled_from(["set", "drop", "add"]))
    value = data.draw(
        _JSON | st.sampled_from(["diff", "content", "terminal", "text", "resource", "allow_once", "edit"])
    )
    key = data.draw(st.sampled_from(_NAMES))
    mutated = _changed(params, path, change if path or change != "drop" else "set", value, key)
    ours, theirs = PAIRS[method]
    assert _outcome(ours, mutated) == _outcome(theirs, mutated), (method, mutated)


def test_our_initialize_is_the_sdks() -> None:
    request = schema.InitializeRequest(
        protocol_version=1,
        client_capabilities=schema.ClientCapabilities(
            fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True),
            terminal=True,
            elicitation=schema.ElicitationCapabilities(
                form=schema.ElicitationFormCapabilities(), url=schema.ElicitationUrlCapabilities()
            ),
        ),
        client_info=schema.Implementation(name="orchestrate", title="orchestrate", version="0.1.0"),
    )
    assert request.model_dump(mode="json", by_alias=True, exclude_none=True) == INITIALIZE
    assert schema.InitializeRequest.model_validate(INITIALIZE) == request


def test_an_acp_run_does_not_load_the_sdk() -> None:
    """The driver and its tools, and the params they validate, load without the SDK's models."""
    probe = (
        "import sys\n"
        "import orchestrate.run.acp, orchestrate.run.acp_tools, orchestrate.run.acp_params\n"
        "print(sorted(m for m in sys.modules if m == 'acp' or m.startswith('acp.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
