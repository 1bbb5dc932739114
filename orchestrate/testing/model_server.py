"""A scripted model server on 127.0.0.1 that real agent CLIs can be pointed at, with no API key.

Speaks the Anthropic Messages API (``POST /v1/messages``), the OpenAI Responses API
(``POST /v1/responses``), OpenAI chat completions (``POST /v1/chat/completions``) and the Gemini API
(``:streamGenerateContent`` / ``:generateContent``), streaming and not, each from ``dialects/``.
Other paths are answered harmlessly (token counts with a count, anything else ``200 {}``) and logged,
so a probe never breaks a run.
Every request is kept in :attr:`ScriptedModelServer.requests` (and appended to a JSONL file if one is
given), so a test can assert what the CLI sent.

    with ScriptedModelServer(Scenario.from_obj({"steps": [{"text": "hi"}]})) as server:
        env = server.anthropic_env()
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from .dialects import anthropic, gemini, openai_chat, openai_responses
from .scenario import Scenario, Step

__all__ = ["ScriptedModelServer"]

Dialect = Callable[[Any, dict[str, Any], Step], None]


class ScriptedModelServer:
    """Serves a scenario on ``127.0.0.1`` at a free port, in a background thread."""

    def __init__(self, scenario: Scenario, log_path: Path | None = None, port: int = 0) -> None:
        self.scenario = scenario
        self.log_path = log_path
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        server = self

        class Handler(_Handler):
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

    def new_id(self, prefix: str) -> str:
        with self._lock:
            return f"{prefix}{next(self._ids):04d}"

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)
            if self.log_path is not None:
                with self.log_path.open("ab") as f:
                    f.write(orjson.dumps(entry) + b"\n")


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request log is ours; stderr stays quiet

    def do_GET(self) -> None:
        self.owner.record({"method": "GET", "path": self.path})
        self.json(200, {"models": [], "data": []} if self.path.split("?")[0].endswith("/models") else {})

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
        path = self.path.split("?")[0].rstrip("/")
        entry: dict[str, Any] = {"method": "POST", "path": self.path, "body": body, "ts": time.time()}
        dialect: Dialect | None = None
        if path.endswith("/messages/count_tokens") or path.endswith(":countTokens"):
            self.owner.record(entry)
            return self.json(200, {"input_tokens": 1000, "totalTokens": 1000})
        if (":streamGenerateContent" in path or ":generateContent" in path) and isinstance(body, dict):
            stream = ":streamGenerateContent" in path
            if not gemini.is_main_request(body):
                self.owner.record(entry)
                return gemini.side_reply(self, body, stream)
            dialect = functools.partial(gemini.reply, stream=stream)
        elif path.endswith("/chat/completions") and isinstance(body, dict):
            if not openai_chat.is_main_request(body):
                self.owner.record(entry)
                return openai_chat.side_reply(self, body)
            dialect = openai_chat.reply
        elif path.endswith("/v1/messages") and isinstance(body, dict):
            dialect = anthropic.reply
            if not anthropic.is_main_request(body):
                # A side request (a model check, a title): harmless, and it does not use up a step.
                self.owner.record(entry)
                return dialect(self, body, Step(text="OK"))
        elif path.endswith("/responses") and isinstance(body, dict):
            dialect = openai_responses.reply
        if dialect is None or not isinstance(body, dict):
            self.owner.record(entry)
            return self.json(200, {})
        step, entry["step"] = self.owner.scenario.take_numbered()
        self.owner.record(entry)
        # The CLI may hang up mid-stream (an interrupt): nothing is left to do then.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            dialect(self, body, step)

    # --- the Responder protocol of dialects/ --------------------------------------------------

    def json(self, status: int, obj: Any) -> None:
        data = orjson.dumps(obj)
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def event(self, name: str | None, data: Any) -> None:
        head = b"event: " + name.encode() + b"\n" if name else b""
        body = data.encode() if isinstance(data, str) else orjson.dumps(data)
        payload = head + b"data: " + body + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        self.wfile.flush()

    def end_sse(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def new_id(self, prefix: str) -> str:
        return self.owner.new_id(prefix)
