"""The scripted model server, dialect by dialect, streaming and not, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrate.errors import ConfigError
from orchestrate.testing import Scenario, ScriptedModelServer

STEPS = [
    {"thinking": "let me see", "text": "Running it now.", "tool": {"name": "exec", "input": {"cmd": "ls"}}},
    {"text": "The tool said: {tool_result}"},
    {"error": {"status": 529, "message": "busy"}},
]


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(Scenario.from_obj({"steps": STEPS})) as s:
        yield s


def post(server: ScriptedModelServer, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    request = urllib.request.Request(
        server.url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["content-type"], response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["content-type"], exc.read()


def sse(raw: bytes) -> list[tuple[str | None, Any]]:
    events = []
    for frame in raw.decode().split("\n\n"):
        name, data = None, None
        for line in frame.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        if data is not None:
            events.append((name, data if data == "[DONE]" else json.loads(data)))
    return events


ANTHROPIC_TOOLS = [{"name": "exec", "input_schema": {}}]


def test_anthropic_streaming_then_tool_result_then_error(server: ScriptedModelServer) -> None:
    body = {
        "model": "m",
        "stream": True,
        "tools": ANTHROPIC_TOOLS,
        "messages": [{"role": "user", "content": "hi"}],
    }
    status, ctype, raw = post(server, "/v1/messages?beta=true", body)
    assert status == 200 and ctype.startswith("text/event-stream")
    events = sse(raw)
    assert [n for n, _ in events][:2] == ["message_start", "content_block_start"] and events[-1][
        0
    ] == "message_stop"
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == "let me see"
    assert "".join(d.get("text", "") for d in deltas) == "Running it now."
    assert json.loads("".join(d.get("partial_json", "") for d in deltas)) == {"cmd": "ls"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "a.txt"}]}
    status, _, raw = post(server, "/v1/messages", {**body, "stream": False, "messages": [result]})
    reply = json.loads(raw)
    assert status == 200 and reply["content"] == [{"type": "text", "text": "The tool said: a.txt"}]
    status, _, raw = post(server, "/v1/messages", body)
    assert status == 529 and json.loads(raw)["error"]["message"] == "busy"
    assert [r.get("step") for r in server.main_requests()] == [0, 1, 2]


def test_anthropic_side_requests_take_no_step(server: ScriptedModelServer) -> None:
    status, _, raw = post(
        server, "/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert status == 200 and json.loads(raw)["content"][0]["text"] == "OK"
    assert post(server, "/v1/messages/count_tokens", {})[0] == 200
    assert server.main_requests() == [] and server.scenario.remaining == 3


def test_openai_responses_streaming_and_not(server: ScriptedModelServer) -> None:
    tools = [{"type": "function", "name": "exec"}, {"type": "custom", "name": "apply_patch"}]
    body = {"model": "gpt", "tools": tools, "input": [{"type": "message", "role": "user", "content": "hi"}]}
    _, _, raw = post(server, "/v1/responses", {**body, "stream": True})
    events = sse(raw)
    done = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert [i["type"] for i in done] == ["reasoning", "message", "function_call"]
    assert json.loads(done[2]["arguments"]) == {"cmd": "ls"} and events[-1][0] == "response.completed"
    answered = [
        *body["input"],
        {"type": "function_call_output", "call_id": "c", "output": "Chunk ID: x\nOutput:\nfile.txt\n"},
    ]
    _, _, raw = post(server, "/v1/responses", {**body, "input": answered, "stream": False})
    reply = json.loads(raw)
    assert reply["output"][0]["content"][0]["text"] == "The tool said: file.txt"
    assert reply["usage"]["total_tokens"] == 120


def test_openai_chat_streaming_and_not(server: ScriptedModelServer) -> None:
    tools = [
        {"type": "function", "function": {"name": "exec"}},
        {"type": "function", "function": {"name": "x"}},
    ]
    body = {
        "model": "q",
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": tools,
        "messages": [{"role": "user", "content": "hi"}],
    }
    _, _, raw = post(server, "/v1/chat/completions", body)
    events = sse(raw)
    assert events[-1] == (None, "[DONE]") and events[-2][1]["usage"]["total_tokens"] == 120
    deltas = [e[1]["choices"][0]["delta"] for e in events[:-2] if e[1]["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "let me see"
    assert "".join(d.get("content") or "" for d in deltas) == "Running it now."
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "exec" and json.loads(calls[1]["function"]["arguments"]) == {
        "cmd": "ls"
    }
    messages = [
        *body["messages"],
        {"role": "tool", "tool_call_id": "c", "content": json.dumps([{"type": "text", "text": "out.txt"}])},
    ]
    _, _, raw = post(server, "/v1/chat/completions", {**body, "stream": False, "messages": messages})
    assert json.loads(raw)["choices"][0]["message"]["content"] == "The tool said: out.txt"


def test_openai_chat_side_requests(server: ScriptedModelServer) -> None:
    classifier = {
        "model": "q",
        "tool_choice": "required",
        "messages": [{"role": "user", "content": "risky?"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "respond_in_schema",
                    "parameters": {"type": "object", "properties": {"shouldBlock": {"type": "boolean"}}},
                },
            }
        ],
    }
    reply = json.loads(post(server, "/v1/chat/completions", classifier)[2])
    call = reply["choices"][0]["message"]["tool_calls"][0]["function"]
    assert (call["name"], json.loads(call["arguments"])) == ("respond_in_schema", {"shouldBlock": False})
    suggestion = {"model": "q", "messages": [{"role": "user", "content": "[SUGGESTION MODE: next?]"}]}
    assert post(server, "/v1/chat/completions", suggestion)[0] == 200
    assert server.main_requests() == []


def test_gemini_streaming_not_streaming_and_the_router(server: ScriptedModelServer) -> None:
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "tools": [{"functionDeclarations": []}],
    }
    status, _, raw = post(server, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", body)
    parts = [p for _, d in sse(raw) for p in d["candidates"][0]["content"]["parts"]]
    assert parts[0] == {"text": "**Thinking**\nlet me see", "thought": True}
    assert "".join(p.get("text", "") for p in parts[1:]) == "Running it now."
    assert parts[-1] == {"functionCall": {"name": "exec", "args": {"cmd": "ls"}}}
    answered = {
        "contents": [
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "exec", "response": {"output": "a.py"}}}],
            }
        ]
    }
    reply = json.loads(post(server, "/v1beta/models/gemini-x:generateContent", answered)[2])
    assert reply["candidates"][0]["content"]["parts"] == [{"text": "The tool said: a.py"}]
    router = {
        "contents": [],
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseJsonSchema": {
                "type": "OBJECT",
                "properties": {"complexity_score": {"type": "INTEGER", "minimum": 1}},
            },
        },
    }
    reply = json.loads(post(server, "/v1beta/models/lite:generateContent", router)[2])
    assert json.loads(reply["candidates"][0]["content"]["parts"][0]["text"]) == {"complexity_score": 1}
    status, _, raw = post(server, "/v1beta/models/gemini-x:generateContent", body)
    assert status == 529 and json.loads(raw)["error"]["message"] == "busy"


def test_ids_are_counted_so_re_recordings_match() -> None:
    body = {"model": "m", "tools": ANTHROPIC_TOOLS, "messages": [{"role": "user", "content": "hi"}]}
    ids = []
    for _ in range(2):
        with ScriptedModelServer(Scenario.from_obj({"steps": STEPS})) as fresh:
            reply = json.loads(post(fresh, "/v1/messages", body)[2])
            ids.append((reply["id"], reply["content"][-1]["id"]))
    assert ids[0] == ids[1] == ("msg_scripted_0002", "toolu_scripted_0001")


def test_running_out_of_steps_and_probes(server: ScriptedModelServer) -> None:
    with ScriptedModelServer(Scenario.from_obj({"steps": []})) as empty:
        body = {"model": "m", "tools": ANTHROPIC_TOOLS, "messages": [{"role": "user", "content": "hi"}]}
        assert "no more steps" in json.loads(post(empty, "/v1/messages", body)[2])["content"][0]["text"]
        assert post(empty, "/anything/else", {})[0] == 200
        assert [r["path"] for r in empty.requests] == ["/v1/messages", "/anything/else"]


def test_scenario_files_in_json_and_yaml(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "steps:\n  - text: hello\n  - tool: {name: Bash, input: {command: ls}}\n"
    )
    scenario = Scenario.load(tmp_path / "s.yaml")
    assert scenario.steps[0].text == "hello" and scenario.steps[1].tools[0].input == {"command": "ls"}
    (tmp_path / "s.json").write_text('{"steps": [{"txet": "typo"}]}')
    with pytest.raises(ConfigError, match="unknown keys"):
        Scenario.load(tmp_path / "s.json")
    (tmp_path / "bad.yaml").write_text("steps: [\n")
    with pytest.raises(ConfigError, match="cannot read"):
        Scenario.load(tmp_path / "bad.yaml")
