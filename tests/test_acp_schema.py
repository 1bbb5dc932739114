"""The ACP traffic recorded from the real Gemini CLI and Qwen Code, and what our client sends, checked
against the protocol's schema as the `agent-client-protocol` package models it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from acp import schema
from pydantic import BaseModel, ValidationError

from orchestrate.process.rawlog import read_raw_log

from .helpers import FIXTURES

CLIENT_REQUESTS: dict[str, type[BaseModel]] = {
    "initialize": schema.InitializeRequest,
    "session/new": schema.NewSessionRequest,
    "session/load": schema.LoadSessionRequest,
    "session/prompt": schema.PromptRequest,
    "session/set_mode": schema.SetSessionModeRequest,
    "authenticate": schema.AuthenticateRequest,
}
AGENT_REQUESTS: dict[str, type[BaseModel]] = {
    "session/request_permission": schema.RequestPermissionRequest,
    "fs/read_text_file": schema.ReadTextFileRequest,
    "fs/write_text_file": schema.WriteTextFileRequest,
}


def messages(folder: str, stream: str) -> list[dict[str, Any]]:
    out = []
    for fixture in sorted((FIXTURES / folder).glob("*.jsonl")):
        data = b"".join(r.data for r in read_raw_log(fixture)[1] if r.stream == stream)
        out += [orjson.loads(line) for line in data.splitlines() if line.strip()]
    return out


@pytest.mark.parametrize("folder", ["acp-gemini", "acp-qwen"])
def test_what_we_send_conforms(folder: str) -> None:
    sent = messages(folder, "stdin")
    checked = 0
    for message in sent:
        model = CLIENT_REQUESTS.get(message.get("method", ""))
        if model is not None:
            model.model_validate(message["params"])
            checked += 1
        elif message.get("method") == "session/cancel":
            schema.CancelNotification.model_validate(message["params"])
        elif "result" in message and isinstance(message["result"], dict) and "outcome" in message["result"]:
            schema.RequestPermissionResponse.model_validate(message["result"])
            checked += 1
    assert checked >= 30


@pytest.mark.parametrize("folder", ["acp-gemini", "acp-qwen"])
def test_what_the_agents_send_conforms_apart_from_known_vendor_traffic(folder: str) -> None:
    received = messages(folder, "stdout")
    updates = [m["params"] for m in received if m.get("method") == "session/update"]
    assert len(updates) > 50
    for params in updates:
        schema.SessionNotification.model_validate(params)
    for message in received:
        model = AGENT_REQUESTS.get(message.get("method", ""))
        if model is not None:
            model.model_validate(message["params"])


def test_a_malformed_update_is_caught_by_the_schema() -> None:
    with pytest.raises(ValidationError):
        schema.SessionNotification.model_validate(
            {"sessionId": "s", "update": {"sessionUpdate": "tool_call"}}
        )
