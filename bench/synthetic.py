"""Synthetic streams in each protocol's real shapes (copied from the fixtures), where one input
dimension can be set on its own: the length of one streamed answer (bytes, in deltas of a given
size), the number of tool calls, of plain lines, of permission requests.  Used to check that time
grows linearly in each, which repeated fixtures alone cannot show (their answers are short).
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
from corpus import Segment

__all__ = ["STREAMS", "WITH_REQUESTS", "stream"]

_SID = "00000000-0000-4000-8000-000000000001"


def _out(objs: list[object]) -> Segment:
    return Segment("stdout", b"".join(orjson.dumps(o) + b"\n" for o in objs))


def _deltas(answer_bytes: int, delta: int) -> list[str]:
    word = ("lorem ipsum dolor sit amet " * (delta // 27 + 1))[:delta]
    return [word] * max(answer_bytes // delta, 0)


def claude(answer_bytes: int, delta: int, tools: int, lines: int, requests: int) -> list[Segment]:
    ev = {"type": "stream_event", "session_id": _SID, "parent_tool_use_id": None}
    out: list[object] = [{"type": "system", "subtype": "init", "session_id": _SID, "model": "m"}]
    mid = "msg_1"
    out.append({**ev, "event": {"type": "message_start", "message": {"id": mid}}})
    out.append(
        {**ev, "event": {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}}
    )
    pieces = _deltas(answer_bytes, delta)
    for p in pieces:
        d = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
        out.append({**ev, "event": d})
    text = "".join(pieces)
    out.append(
        {
            "type": "assistant",
            "session_id": _SID,
            "message": {"id": mid, "content": [{"type": "text", "text": text}]},
        }
    )
    out.append({**ev, "event": {"type": "content_block_stop", "index": 0}})
    for t in range(tools):
        tid = f"toolu_{t}"
        block = {"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": f"echo {t}"}}
        out.append({"type": "assistant", "session_id": _SID, "message": {"id": f"m{t}", "content": [block]}})
        result = {"type": "tool_result", "tool_use_id": tid, "content": f"{t}", "is_error": False}
        out.append(
            {
                "type": "user",
                "session_id": _SID,
                "message": {"role": "user", "content": [result]},
                "tool_use_result": {"stdout": f"{t}\n", "stderr": "", "interrupted": False},
            }
        )
    out.extend({"type": "keep_alive"} for _ in range(lines))
    segments = [_out(out)]
    for r in range(requests):  # can_use_tool, the approval note, our answer on stdin
        rid, tid = f"req-{r}", f"toolu_r{r}"
        ask = {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "ls"}, "tool_use_id": tid}
        segments.append(_out([{"type": "control_request", "request_id": rid, "request": ask}]))
        segments.append(Segment(None, event={"type": "approval", "request_id": rid, "decision": "approved"}))
        body = {"behavior": "allow", "updatedInput": {"command": "ls"}}
        answer = {
            "type": "control_response",
            "response": {"subtype": "success", "request_id": rid, "response": body},
        }
        segments.append(Segment("stdin", orjson.dumps(answer) + b"\n"))
    result = {"type": "result", "subtype": "success", "is_error": False, "session_id": _SID, "usage": {}}
    return [*segments, _out([result])]


def _rpc(method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def app_server(answer_bytes: int, delta: int, tools: int, lines: int, requests: int) -> list[Segment]:
    turn = {"threadId": "t", "turnId": "u"}
    out: list[object] = [_rpc("turn/started", {**turn, "turn": {"id": "u"}})]
    item = {"id": "msg", "type": "agentMessage", "text": ""}
    out.append(_rpc("item/started", {**turn, "item": item}))
    pieces = _deltas(answer_bytes, delta)
    out.extend(_rpc("item/agentMessage/delta", {**turn, "itemId": "msg", "delta": p}) for p in pieces)
    out.append(_rpc("item/completed", {**turn, "item": {**item, "text": "".join(pieces)}}))
    for t in range(tools):
        cmd = {
            "id": f"call_{t}",
            "type": "commandExecution",
            "command": f"/bin/bash -lc 'echo {t}'",
            "status": "inProgress",
        }
        out.append(_rpc("item/started", {**turn, "item": cmd}))
        out.append(
            _rpc("item/commandExecution/outputDelta", {**turn, "itemId": f"call_{t}", "delta": f"{t}\n"})
        )
        done = {**cmd, "status": "completed", "exitCode": 0, "aggregatedOutput": f"{t}\n"}
        out.append(_rpc("item/completed", {**turn, "item": done}))
    out.extend(_rpc("thread/status/changed", {"threadId": "t"}) for _ in range(lines))
    segments = [_out(out)]
    for r in range(requests):  # requestApproval, the approval note, our answer on stdin
        ask = {**turn, "itemId": f"req_{r}", "command": "/bin/bash -lc 'ls'", "reason": "why"}
        segments.append(_out([{**_rpc("item/commandExecution/requestApproval", ask), "id": r}]))
        segments.append(
            Segment(None, event={"type": "approval", "request_id": str(r), "decision": "approved"})
        )
        segments.append(Segment("stdin", orjson.dumps({"id": r, "result": {"decision": "accept"}}) + b"\n"))
    done = _rpc("turn/completed", {**turn, "turn": {"id": "u", "status": "completed"}})
    return [*segments, _out([done])]


def codex_exec(answer_bytes: int, delta: int, tools: int, lines: int, requests: int) -> list[Segment]:
    # exec streams no deltas: an answer is one item.completed line, however long.
    out: list[object] = [{"type": "thread.started", "thread_id": _SID}, {"type": "turn.started"}]
    text = "".join(_deltas(answer_bytes, delta))
    out.append({"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": text}})
    for t in range(tools):
        cmd = {
            "id": f"item_{t + 1}",
            "type": "command_execution",
            "command": f"/bin/bash -lc 'echo {t}'",
            "aggregated_output": "",
            "exit_code": None,
            "status": "in_progress",
        }
        out.append({"type": "item.started", "item": cmd})
        out.append(
            {
                "type": "item.completed",
                "item": {**cmd, "aggregated_output": f"{t}\n", "exit_code": 0, "status": "completed"},
            }
        )
    out.extend({"type": "turn.started"} for _ in range(lines))
    out.append({"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}})
    return [Segment("stdin", b"please do the task"), _out(out)]


def acp(answer_bytes: int, delta: int, tools: int, lines: int, requests: int) -> list[Segment]:
    def update(u: dict[str, object]) -> dict[str, object]:
        return _rpc("session/update", {"sessionId": _SID, "update": u})

    out: list[object] = []
    for p in _deltas(answer_bytes, delta):
        out.append(update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": p}}))
    for t in range(tools):
        call = {
            "sessionUpdate": "tool_call",
            "toolCallId": f"run-{t}",
            "status": "in_progress",
            "title": f"echo {t}",
            "kind": "execute",
            "rawInput": {"command": f"echo {t}"},
        }
        out.append(update(call))
        done = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": f"run-{t}",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": f"{t}"}}],
        }
        out.append(update(done))
    out.extend(_rpc("qwen/notify/session/prompt-suggestion", {}) for _ in range(lines))
    segments = [_out(out)]
    options = [{"optionId": "once", "name": "Allow", "kind": "allow_once"}]
    for r in range(requests):  # request_permission, the approval note, our answer on stdin
        call = {"toolCallId": f"ask-{r}", "status": "pending", "title": "ls", "kind": "execute"}
        ask = {"sessionId": _SID, "options": options, "toolCall": call}
        segments.append(_out([{**_rpc("session/request_permission", ask), "id": 100 + r}]))
        segments.append(
            Segment(None, event={"type": "approval", "request_id": str(100 + r), "decision": "approved"})
        )
        answer = {
            "jsonrpc": "2.0",
            "id": 100 + r,
            "result": {"outcome": {"outcome": "selected", "optionId": "once"}},
        }
        segments.append(Segment("stdin", orjson.dumps(answer) + b"\n"))
    out = [{"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}]
    prompt = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "session/prompt",
        "params": {"sessionId": _SID, "prompt": [{"type": "text", "text": "go"}]},
    }
    return [Segment("stdin", orjson.dumps(prompt) + b"\n"), *segments, _out(out)]


def cursor(answer_bytes: int, delta: int, tools: int, lines: int, requests: int) -> list[Segment]:
    out: list[object] = [{"type": "system", "subtype": "init", "cwd": "/w", "session_id": _SID, "model": "m"}]
    for i, p in enumerate(_deltas(answer_bytes, delta)):
        out.append(
            {
                "type": "assistant",
                "message": {"role": "assistant", "content": [{"type": "text", "text": p}]},
                "session_id": _SID,
                "timestamp_ms": i,
            }
        )
    for t in range(tools):
        args = {"command": f"echo {t}"}
        out.append(
            {
                "type": "tool_call",
                "subtype": "started",
                "call_id": f"c{t}",
                "tool_call": {"shellToolCall": {"args": args}},
                "session_id": _SID,
            }
        )
        res = {"success": {"stdout": f"{t}\n", "stderr": "", "exitCode": 0}}
        out.append(
            {
                "type": "tool_call",
                "subtype": "completed",
                "call_id": f"c{t}",
                "tool_call": {"shellToolCall": {"args": args, "result": res}},
                "session_id": _SID,
            }
        )
    out.extend({"type": "thinking", "subtype": "delta", "text": "", "session_id": _SID} for _ in range(lines))
    out.append({"type": "result", "subtype": "success", "is_error": False, "session_id": _SID})
    return [_out(out)]


STREAMS: dict[str, Callable[[int, int, int, int, int], list[Segment]]] = {
    "claude-stream-json": claude,
    "codex-app-server": app_server,
    "codex-exec": codex_exec,
    "acp-gemini": acp,
    "cursor-jsonl": cursor,
}


# Protocols where the agent asks permission over the stream (the requests dimension).
WITH_REQUESTS = ("claude-stream-json", "codex-app-server", "acp-gemini")


def stream(
    protocol: str,
    *,
    answer_bytes: int = 0,
    delta: int = 20,
    tools: int = 0,
    lines: int = 0,
    requests: int = 0,
) -> list[Segment]:
    return STREAMS[protocol](answer_bytes, delta, tools, lines, requests)
