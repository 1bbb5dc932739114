from __future__ import annotations

import orjson

from orchestrate.peers.claude_control import (
    CanUseTool,
    ClaudeControlPeer,
    ControlAnswered,
    ControlCancelled,
    SessionState,
    TurnEnded,
    UnsupportedRequest,
)


def line(obj: object) -> str:
    return orjson.dumps(obj).decode()


def test_requests_have_unique_ids_and_answers_match_only_ours() -> None:
    peer = ClaudeControlPeer()
    rid, data = peer.request("interrupt")
    rid2, _ = peer.request("interrupt")
    assert rid != rid2 and orjson.loads(data)["request"] == {"subtype": "interrupt"}
    echo = {"type": "control_response", "response": {"subtype": "success", "request_id": "not-ours"}}
    assert peer.receive_line(line(echo)) == []
    ours = {
        "type": "control_response",
        "response": {"subtype": "success", "request_id": rid, "response": {"a": 1}},
    }
    assert peer.receive_line(line(ours)) == [ControlAnswered(rid, True, {"a": 1}, None)]
    assert peer.receive_line(line(ours)) == []  # answered once only


def test_can_use_tool_allow_deny_and_cancel() -> None:
    peer = ClaudeControlPeer()
    req = {
        "type": "control_request",
        "request_id": "x",
        "request": {
            "subtype": "can_use_tool",
            "tool_name": "Bash",
            "input": {"command": "ls"},
            "tool_use_id": "t",
        },
    }
    [event] = peer.receive_line(line(req))
    assert isinstance(event, CanUseTool) and event.input == {"command": "ls"}
    assert "x" in peer.pending_approvals
    allow = orjson.loads(peer.allow("x", {"command": "ls -la"}))
    assert allow["response"]["response"] == {"behavior": "allow", "updatedInput": {"command": "ls -la"}}
    assert "x" not in peer.pending_approvals
    deny = orjson.loads(peer.deny("y", "no", interrupt=True))
    assert deny["response"]["response"] == {"behavior": "deny", "message": "no", "interrupt": True}
    peer.receive_line(line({**req, "request_id": "z"}))
    assert peer.receive_line(line({"type": "control_cancel_request", "request_id": "z"})) == [
        ControlCancelled("z")
    ]
    assert "z" not in peer.pending_approvals


def test_unknown_requests_are_answered_with_an_error() -> None:
    peer = ClaudeControlPeer()
    [event] = peer.receive_line(
        line({"type": "control_request", "request_id": "h", "request": {"subtype": "hook_callback"}})
    )
    assert isinstance(event, UnsupportedRequest)
    reply = orjson.loads(event.reply)
    assert reply["response"]["subtype"] == "error" and reply["response"]["request_id"] == "h"


def test_turn_and_state_events_and_noise() -> None:
    peer = ClaudeControlPeer()
    assert peer.receive_line(line({"type": "result", "is_error": True, "subtype": "x"})) == [
        TurnEnded(True, "x")
    ]
    assert peer.receive_line(
        line({"type": "system", "subtype": "session_state_changed", "state": "idle"})
    ) == [SessionState("idle")]
    assert peer.receive_line('{"type":"assistant","text":"control_request"}') == []
    assert peer.receive_line("not json control_") == []
