"""A scripted model server on 127.0.0.1 that real agent CLIs can be pointed at, with no API key.

Speaks the Anthropic Messages API (``POST /v1/messages``, streaming SSE or not, ``count_tokens``);
any other path is answered ``200 {}`` and logged, so a probe never breaks a run.  Every request is
kept in :attr:`ScriptedModelServer.requests` (and appended to a JSONL file if one is given), so a
test can assert what the CLI sent.

    with ScriptedModelServer(Scenario.from_obj({"steps": [{"text": "hi"}]})) as server:
        env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test"}
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from .scenario import Scenario, Step

__all__ = ["ScriptedModelServer"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


class ScriptedModelServer:
    """Serves a scenario on ``127.0.0.1`` at a free port, in a background thread."""

    def __init__(self, scenario: Scenario, log_path: Path | None = None, port: int = 0) -> None:
        self.scenario = scenario
        self.log_path = log_path
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(_AnthropicHandler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-model", daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def anthropic_env(self) -> dict[str, str]:
        """What Claude Code needs to talk to this server and nothing else (protocols/claude-code.md)."""
        return {
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": "sk-test-scripted",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_MAX_RETRIES": "1",
        }

    def main_requests(self) -> list[dict[str, Any]]:
        """Requests of the main conversation (the ones that took a scenario step)."""
        return [r for r in self.requests if r.get("step") is not None]

    def start(self) -> ScriptedModelServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)
            if self.log_path is not None:
                with self.log_path.open("ab") as f:
                    f.write(orjson.dumps(entry) + b"\n")


class _AnthropicHandler(BaseHTTPRequestHandler):
    owner: ScriptedModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request log is ours; stderr stays quiet

    def do_GET(self) -> None:
        self.owner.record({"method": "GET", "path": self.path})
        self._json(200, {})

    def do_HEAD(self) -> None:
        self.owner.record({"method": "HEAD", "path": self.path})
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            body = None
        path = self.path.split("?")[0]
        entry: dict[str, Any] = {"method": "POST", "path": self.path, "body": body, "ts": time.time()}
        if path.endswith("/v1/messages/count_tokens"):
            self.owner.record(entry)
            return self._json(200, {"input_tokens": 1000})
        if not path.endswith("/v1/messages") or not isinstance(body, dict):
            self.owner.record(entry)
            return self._json(200, {})
        if not body.get("tools"):
            # A side request (a model check, a title): harmless, and it does not use up a step.
            self.owner.record(entry)
            return self._reply(body, Step(text="OK"))
        step = self.owner.scenario.take()
        entry["step"] = self.owner.scenario.steps.index(step) if step in self.owner.scenario.steps else -1
        self.owner.record(entry)
        if step.error is not None:
            status = int(step.error["status"])
            etype = str(step.error.get("type") or _ERROR_TYPES.get(status, "api_error"))
            return self._json(
                status,
                {
                    "type": "error",
                    "error": {
                        "type": etype,
                        "message": str(step.error.get("message") or f"scripted {etype}"),
                    },
                },
            )
        self._reply(body, step)

    # --- responses ----------------------------------------------------------------------------

    def _reply(self, body: dict[str, Any], step: Step) -> None:
        blocks = _blocks(step, _last_tool_result(body.get("messages") or []))
        message: dict[str, Any] = {
            "id": "msg_scripted_" + secrets.token_hex(10),
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or "claude-scripted",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(body, 1),
        }
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        if not body.get("stream"):
            message.update(content=blocks, stop_reason=stop, usage=_usage(body, _out_tokens(blocks)))
            return self._json(200, message)
        # The CLI may hang up mid-stream (an interrupt): nothing is left to do then.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._stream(message, blocks, stop, step.delay)

    def _stream(self, message: dict[str, Any], blocks: list[dict[str, Any]], stop: str, delay: float) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._event("message_start", {"type": "message_start", "message": message})
        for i, block in enumerate(blocks):
            start = (
                {**block, "text": ""}
                if block["type"] == "text"
                else {**block, "thinking": "", "signature": ""}
                if block["type"] == "thinking"
                else {**block, "input": {}}
            )
            self._event(
                "content_block_start", {"type": "content_block_start", "index": i, "content_block": start}
            )
            for delta in _deltas(block):
                self._event(
                    "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
                )
                if delay:
                    time.sleep(delay)
            self._event("content_block_stop", {"type": "content_block_stop", "index": i})
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": _out_tokens(blocks)},
            },
        )
        self._event("message_stop", {"type": "message_stop"})
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, name: str, data: dict[str, Any]) -> None:
        payload = b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        self.wfile.flush()

    def _json(self, status: int, obj: Any) -> None:
        data = orjson.dumps(obj)
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _blocks(step: Step, tool_result: str | None) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if step.thinking:
        blocks.append({"type": "thinking", "thinking": step.thinking, "signature": "scripted"})
    text = step.render_text(tool_result)
    if text:
        blocks.append({"type": "text", "text": text})
    for call in step.tools:
        blocks.append(
            {
                "type": "tool_use",
                "id": "toolu_scripted_" + secrets.token_hex(10),
                "name": call.name,
                "input": call.input,
            }
        )
    return blocks


def _deltas(block: dict[str, Any]) -> list[dict[str, Any]]:
    if block["type"] == "tool_use":
        js = orjson.dumps(block["input"]).decode()
        cuts = [0, len(js) // 2, len(js)]
        return [{"type": "input_json_delta", "partial_json": js[a:b]} for a, b in itertools.pairwise(cuts)]
    key, dtype = ("text", "text_delta") if block["type"] == "text" else ("thinking", "thinking_delta")
    words = block[key].split(" ")
    pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
    return [{"type": dtype, key: p} for p in pieces if p]


def _last_tool_result(messages: list[Any]) -> str | None:
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if not isinstance(content, list):
            return None
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if not results:
            return None
        return "; ".join(_result_text(r) for r in results)
    return None


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        content = "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ("ERROR " if block.get("is_error") else "") + str(content or "")


def _usage(body: dict[str, Any], output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": 100 + len(orjson.dumps(body.get("messages") or [])) // 40,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    }


def _out_tokens(blocks: list[dict[str, Any]]) -> int:
    return sum(
        max(1, len(str(b.get("text") or b.get("thinking") or "")) // 4) if b["type"] != "tool_use" else 20
        for b in blocks
    )
