"""`orchestrate serve` over real HTTP: a server in a subprocess (uvicorn, the engine's worker inside,
a SQLite store), the fake Claude as the agent, httpx as the client."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrate.entries import PATCH_ADAPTER

from .helpers import FAKE_CLAUDE, ROOT

LAUNCH = """
import json, sys
from orchestrate.serve.config import ServeConfig
from orchestrate.serve.server import serve
serve(ServeConfig(**json.loads(sys.argv[1])), say=lambda s: print(s, file=sys.stderr, flush=True),
      log_level="warning")
"""
FAKE = {"base_command": [sys.executable, str(FAKE_CLAUDE)]}


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    base: str
    token: str
    home: Path
    log: list[str]
    drain: threading.Thread | None = None

    def client(self, **options: Any) -> httpx.Client:
        headers = {"authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=self.base, headers=headers, timeout=20, **options)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.drain is not None:
            self.drain.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def start_server(home: Path, timeout: float = 30, **config: Any) -> Server:
    """A server on a free port with ``config`` (ServeConfig fields); waits until it listens."""
    home.mkdir(parents=True, exist_ok=True)
    settings = {"port": 0, "allow_commands": True, "poll": 0.02} | config
    env = os.environ | {"ORCHESTRATE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("ORCHESTRATE_SERVE_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, json.dumps(settings, default=str)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
        env=env,
    )
    assert proc.stderr is not None
    log: list[str] = []
    base = token = None
    deadline = time.monotonic() + timeout
    while (base is None or token is None) and time.monotonic() < deadline:
        line = proc.stderr.readline().decode()
        if not line:
            break
        log.append(line)
        if line.startswith("orchestrate serve on "):
            base = line.split()[3]
        elif line.startswith("board: "):
            token = line.strip().rpartition("#token=")[2]
    if base is None or token is None:
        proc.kill()
        raise AssertionError("the server did not start:\n" + "".join(log))
    server = Server(proc, base, token, home, log)
    # Keep draining its stderr so it never blocks on a full pipe.
    server.drain = threading.Thread(target=lambda: log.extend(_lines(proc)), daemon=True)
    server.drain.start()
    return server


def _lines(proc: subprocess.Popen[bytes]) -> Iterator[str]:
    assert proc.stderr is not None
    for raw in proc.stderr:
        yield raw.decode(errors="replace")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("serve") / "home")
    yield s
    s.stop()


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


# --- helpers: tasks and the stream ----------------------------------------------------------------


def create(http: httpx.Client, prompt: str, cwd: Path, **extra: Any) -> int:
    body = {"prompt": prompt, "executor": "claude-code", "cwd": str(cwd), "executor_options": FAKE} | extra
    r = http.post("/api/tasks", json=body)
    assert r.status_code == 201, r.text
    return int(r.json()["task"]["id"])


@dataclass
class Message:
    id: str | None
    event: str
    data: dict[str, Any]


class Stream:
    """An SSE stream read message by message, with every wait bounded."""

    def __init__(self, http: httpx.Client, path: str, headers: dict[str, str] | None = None) -> None:
        self._cm = http.stream("GET", path, headers=headers or {}, timeout=httpx.Timeout(20, read=20))
        self.response = self._cm.__enter__()
        assert self.response.status_code == 200, self.response.read()
        assert self.response.headers["content-type"].startswith("text/event-stream")
        self._lines = self.response.iter_lines()

    def next(self) -> Message:
        fields: dict[str, str] = {}
        data: list[str] = []
        for line in self._lines:
            if line == "":
                if data:
                    return Message(
                        fields.get("id"), fields.get("event", "message"), json.loads("\n".join(data))
                    )
                fields.clear()
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            else:
                fields[name] = value
        raise AssertionError("the stream ended")

    def until(self, pred: Any, limit: int = 10_000) -> list[Message]:
        got = []
        for _ in range(limit):
            m = self.next()
            got.append(m)
            if pred(m):
                return got
        raise AssertionError("never came")

    def close(self) -> None:
        self._cm.__exit__(None, None, None)


def state_is(*statuses: str) -> Any:
    return lambda m: m.event == "state" and m.data["data"]["status"] in statuses


def all_events(http: httpx.Client, task_id: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        page = http.get(f"/api/tasks/{task_id}/events", params={"after": out[-1]["seq"] if out else 0}).json()
        if not page:
            return out
        out.extend(page)


def wait_status(http: httpx.Client, task_id: int, *statuses: str, seconds: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        task = http.get(f"/api/tasks/{task_id}").json()["task"]
        if task["status"] in statuses:
            return dict(task)
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} never reached {statuses}")


def tool_entries(messages: list[Message]) -> list[dict[str, Any]]:
    return [
        m.data["data"]["entry"]["type"]["tool"]
        for m in messages
        if m.event == "patch" and m.data["data"]["entry"]["type"]["kind"] == "tool_use"
    ]


# --- the tests ------------------------------------------------------------------------------------


def test_create_follow_the_stream_and_approve_with_changed_input(http: httpx.Client, tmp_path: Path) -> None:
    task_id = create(http, "tool", tmp_path)
    stream = Stream(http, f"/api/tasks/{task_id}/stream")
    try:
        asked = stream.until(state_is("waiting_approval"))[-1]
        approval_id = asked.data["data"]["approval_id"]
        [pending] = http.get("/api/approvals", params={"task_id": task_id}).json()
        assert pending["id"] == approval_id and pending["request"]["command"] == "echo original"
        r = http.post(
            f"/api/approvals/{approval_id}",
            json={"decision": "approve", "updated_input": {"command": "echo changed"}, "by": "alice"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["decision"] == "approved" and r.json()["answered_by"].startswith("alice")
        rest = stream.until(state_is("done", "failed"))
    finally:
        stream.close()
    assert rest[-1].data["data"]["status"] == "done"
    messages = [*stream_history(http, task_id)]
    # What the agent ran is what the person changed it to.
    outputs = [t for t in tool_entries(messages) if t["status"] == "success"]
    assert outputs and "ran: echo changed" in json.dumps(outputs[-1])
    # Each patch is a line of `--output jsonl` as it stands: the model gives back the same JSON.
    patches = [m.data for m in messages if m.event == "patch"]
    assert patches
    for p in patches:
        assert PATCH_ADAPTER.validate_python(p["data"]).to_json_dict() == p["data"]
        assert p["runId"] is not None


def stream_history(http: httpx.Client, task_id: int, raw: bool = False) -> Iterator[Message]:
    """A finished task's whole stream, from the start."""
    stream = Stream(http, f"/api/tasks/{task_id}/stream" + ("?raw=true" if raw else ""))
    last = http.get(f"/api/tasks/{task_id}").json()["task"]["last_seq"]
    kinds = {"patch", "state", "notice", "raw"} if raw else {"patch", "state", "notice"}
    wanted = [e["seq"] for e in all_events(http, task_id) if e["kind"] in kinds]
    try:
        for seq in wanted:
            m = stream.next()
            assert m.id == str(seq)
            yield m
    finally:
        stream.close()
    assert wanted[-1] <= last


def test_first_answer_wins_when_many_clients_answer_at_once(
    server: Server, http: httpx.Client, tmp_path: Path
) -> None:
    task_id = create(http, "tool", tmp_path)
    stream = Stream(http, f"/api/tasks/{task_id}/stream")
    try:
        approval_id = stream.until(state_is("waiting_approval"))[-1].data["data"]["approval_id"]
    finally:
        stream.close()
    barrier = threading.Barrier(8)
    results: list[httpx.Response] = []

    def answer(i: int) -> None:
        body = {"decision": "approve", "by": f"c{i}"} if i % 2 else {"decision": "deny", "by": f"c{i}"}
        with server.client() as mine:
            barrier.wait(10)
            results.append(mine.post(f"/api/approvals/{approval_id}", json=body))

    threads = [threading.Thread(target=answer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(r.status_code for r in results) == [200] + [409] * 7
    [won] = [r.json() for r in results if r.status_code == 200]
    for r in results:
        if r.status_code == 409:
            error = r.json()["error"]
            assert error["code"] == "already_answered" and "already answered" in error["message"]
            assert (error["approval"]["decision"], error["approval"]["answered_by"]) == (
                won["decision"],
                won["answered_by"],
            )
    task = wait_status(http, task_id, "done", "failed")
    assert task["status"] == "done"
    final = tool_entries(list(stream_history(http, task_id)))[-1]
    assert final["status"] == ("success" if won["decision"] == "approved" else "denied")


@pytest.mark.parametrize(
    ("answer", "tool_status", "task_status", "stored"),
    [
        (
            {"decision": "approve", "for_session": True},
            "success",
            "done",
            {"for_session": True, "scope": "call"},
        ),
        ({"decision": "deny", "reason": "not on a friday"}, "denied", "done", None),
        (
            {"decision": "deny", "reason": "stop now", "interrupt": True},
            "denied",
            "failed",
            {"interrupt": True},
        ),
    ],
    ids=["approve-for-session", "deny-with-reason", "deny-and-stop"],
)
def test_every_kind_of_answer_reaches_the_agent(
    http: httpx.Client,
    tmp_path: Path,
    answer: dict[str, Any],
    tool_status: str,
    task_status: str,
    stored: dict[str, Any] | None,
) -> None:
    task_id = create(http, "tool", tmp_path)
    stream = Stream(http, f"/api/tasks/{task_id}/stream")
    try:
        approval_id = stream.until(state_is("waiting_approval"))[-1].data["data"]["approval_id"]
        r = http.post(f"/api/approvals/{approval_id}", json=answer)
        assert r.status_code == 200, r.text
        stream.until(state_is("done", "failed", "cancelled"))
    finally:
        stream.close()
    record = http.get(f"/api/approvals/{approval_id}").json()
    assert record["request"].get("answer") == stored
    assert record["reason"] == answer.get("reason")
    tools = tool_entries(list(stream_history(http, task_id)))
    assert tools[-1]["status"] == tool_status
    if answer.get("reason"):
        assert answer["reason"] in json.dumps(tools[-1])
    task = http.get(f"/api/tasks/{task_id}").json()["task"]
    run = http.get(f"/api/tasks/{task_id}/runs").json()[-1]
    # Deny and stop interrupts the turn: the fake ends it as aborted, so the run is not a success.
    assert (task["status"] == "done") == (task_status == "done"), (task, run)


def test_a_bad_answer_is_refused_and_answers_nothing(http: httpx.Client, tmp_path: Path) -> None:
    task_id = create(http, "tool", tmp_path)
    stream = Stream(http, f"/api/tasks/{task_id}/stream")
    try:
        approval_id = stream.until(state_is("waiting_approval"))[-1].data["data"]["approval_id"]
    finally:
        stream.close()
    for body in (
        {"decision": "approve", "interrupt": True},
        {"decision": "deny", "for_session": True},
        {"decision": "maybe"},
        {"decision": "approve", "surprise": 1},
    ):
        r = http.post(f"/api/approvals/{approval_id}", json=body)
        assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_request"), body
    # A client that goes away mid-request has answered nothing: its body never completes.
    host, port = str(http.base_url.host), int(http.base_url.port or 80)
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(
            f"POST /api/approvals/{approval_id} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: {http.headers['authorization']}\r\nContent-Type: application/json\r\n"
            'Content-Length: 40\r\n\r\n{"decision": "appro'.encode()
        )
        time.sleep(0.3)
    time.sleep(0.3)
    assert http.get(f"/api/approvals/{approval_id}").json()["status"] == "open"
    assert http.post(f"/api/approvals/{approval_id}", json={"decision": "approve"}).status_code == 200
    assert wait_status(http, task_id, "done", "failed")["status"] == "done"


def test_reconnect_with_last_event_id_misses_nothing_and_doubles_nothing(
    http: httpx.Client, tmp_path: Path
) -> None:
    task_id = create(http, "slow", tmp_path)
    seen: list[Message] = []
    stream = Stream(http, f"/api/tasks/{task_id}/stream?raw=true")
    try:
        seen += [stream.next() for _ in range(6)]
    finally:
        stream.close()
    time.sleep(0.6)  # the agent goes on meanwhile
    for _ in range(3):  # drop and resume a few times, as a flaky network would
        stream = Stream(http, f"/api/tasks/{task_id}/stream?raw=true", {"last-event-id": str(seen[-1].id)})
        try:
            seen += [stream.next() for _ in range(5)]
        finally:
            stream.close()
        time.sleep(0.2)
    r = http.post(f"/api/tasks/{task_id}/cancel")
    assert r.status_code == 200 and (r.json()["cancel_requested"] or r.json()["status"] == "cancelled")
    stream = Stream(http, f"/api/tasks/{task_id}/stream?raw=true", {"last-event-id": str(seen[-1].id)})
    try:
        seen += stream.until(state_is("cancelled", "done", "failed"))
    finally:
        stream.close()
    assert seen[-1].data["data"]["status"] == "cancelled"
    stored = all_events(http, task_id)
    ids = [int(m.id or 0) for m in seen]
    assert ids == [e["seq"] for e in stored][: len(ids)]  # in order, none missed, none twice
    assert ids == list(range(1, len(ids) + 1))
    assert [m.data["data"] for m in seen] == [e["data"] for e in stored][: len(ids)]
    # A resume from an id the task does not have yet is refused, not silently waited on.
    r = http.get(f"/api/tasks/{task_id}/stream", headers={"last-event-id": "999999"})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_request")
    r = http.get(f"/api/tasks/{task_id}/stream", headers={"last-event-id": "12; drop table"})
    assert r.status_code == 422


def test_cancel_a_queued_and_a_running_task_and_retry(http: httpx.Client, tmp_path: Path) -> None:
    blocker = create(http, "slow", tmp_path)
    queued = create(http, "plain", tmp_path, depends_on=[blocker])
    r = http.post(f"/api/tasks/{queued}/cancel")
    assert r.json()["status"] == "cancelled"
    wait_status(http, blocker, "running")
    assert http.post(f"/api/tasks/{blocker}/cancel").json()["cancel_requested"] is True
    assert wait_status(http, blocker, "cancelled", "done", "failed")["status"] == "cancelled"
    [run] = http.get(f"/api/tasks/{blocker}/runs").json()
    assert run["status"] in ("cancelled", "interrupted")
    # A done task cannot be retried (409 invalid_state); a cancelled one can.
    done = create(http, "plain", tmp_path)
    wait_status(http, done, "done")
    r = http.post(f"/api/tasks/{done}/retry")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "invalid_state")
    # Retried, the cancelled dependent is queued again, and waits for the task it depends on.
    assert http.post(f"/api/tasks/{queued}/retry").json()["status"] == "queued"
    crashed = create(http, "crash", tmp_path)
    assert wait_status(http, crashed, "failed")["attempts"] == 1
    assert http.post(f"/api/tasks/{crashed}/retry").json()["status"] in ("queued", "running", "failed")
    assert wait_status(http, crashed, "failed")["attempts"] == 2
    assert len(http.get(f"/api/tasks/{crashed}/runs").json()) == 2
    assert http.get(f"/api/tasks/{queued}/runs").json() == []


def test_a_follow_up_is_a_new_turn_on_the_same_stream(http: httpx.Client, tmp_path: Path) -> None:
    task_id = create(http, "plain", tmp_path)
    stream = Stream(http, f"/api/tasks/{task_id}/stream")
    try:
        stream.until(state_is("done"))
        r = http.post(f"/api/tasks/{task_id}/messages", json={"text": "plain again"})
        assert r.status_code == 200 and r.json()["starts_now"] is True
        second = stream.until(state_is("done"))
    finally:
        stream.close()
    runs = http.get(f"/api/tasks/{task_id}/runs").json()
    assert len(runs) == 2 and runs[1]["prompt"] == "plain again"
    assert {m.data["runId"] for m in second if m.event == "patch"} == {runs[1]["id"]}
    entries = http.get(f"/api/runs/{runs[1]['id']}/entries").json()["entries"]
    assert entries[0]["content"] == "plain again"
    r = http.post(f"/api/tasks/{task_id}/messages", json={"text": ""})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_request")


def test_list_with_filters_and_paging(http: httpx.Client, tmp_path: Path) -> None:
    ids = [create(http, "plain", tmp_path, labels=["paging-test"], priority=i) for i in range(5)]
    got: list[int] = []
    after = 0
    while True:
        page = http.get("/api/tasks", params={"label": "paging-test", "limit": 2, "after_id": after}).json()
        got += [t["id"] for t in page["tasks"]]
        if page["next_after_id"] is None:
            break
        after = page["next_after_id"]
    assert got == ids
    for t in ids:
        wait_status(http, t, "done")
    done = http.get("/api/tasks", params=[("status", "done"), ("label", "paging-test")]).json()["tasks"]
    assert [t["id"] for t in done] == ids
    r = http.get("/api/tasks", params={"status": "nonsense"})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_request")
    assert http.get("/api/tasks", params={"limit": 0}).status_code == 422


def test_bad_tasks_are_refused_with_a_stable_code(http: httpx.Client, tmp_path: Path) -> None:
    base = {"prompt": "plain", "executor": "claude-code", "cwd": str(tmp_path)}
    cases = [
        ({**base, "executor": "no-such-agent"}, 422, "invalid_request"),
        ({**base, "executor": "../../bin/sh"}, 422, "invalid_request"),
        ({**base, "cwd": "relative/dir"}, 422, "invalid_request"),
        ({**base, "cwd": str(tmp_path / "missing")}, 422, "invalid_request"),
        ({**base, "cwd": str(FAKE_CLAUDE)}, 422, "invalid_request"),
        ({**base, "prompt": ""}, 422, "invalid_request"),
        ({**base, "run_options": {"not_an_option": 1}}, 422, "invalid_request"),
        ({**base, "depends_on": [987654]}, 404, "not_found"),
        ({**base, "workspace": "somewhere"}, 422, "invalid_request"),
    ]
    for body, status, code in cases:
        r = http.post("/api/tasks", json=body)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), (body, r.text)
    r = http.post("/api/tasks", content=b"{not json", headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_request")


def test_ids_are_validated_and_never_name_a_file(http: httpx.Client) -> None:
    for path in (
        "/api/tasks/0",
        "/api/tasks/-1",
        "/api/tasks/1e3",
        "/api/tasks/99999999999999999999999999",
        "/api/tasks/%2e%2e%2fstore.db",
        "/api/runs/abc/entries",
        "/api/approvals/1.5",
        "/api/tasks/1/rollback/..%2f..%2fHEAD",
    ):
        r = http.get(path) if "rollback" not in path else http.post(path)
        assert r.status_code in (404, 422), path
        assert r.json()["error"]["code"] in ("invalid_request", "not_found"), path
    for name in ("..%2fserve-token", "..%2f..%2fstore.db", "index.html", "login.html", "nope.js"):
        r = http.get(f"/static/{name}")
        assert r.status_code == 404, name
        assert b"token" not in r.content.lower() or name == "..%2fserve-token"
    assert http.get("/static/board.js").status_code == 200


def test_executors_and_openapi(http: httpx.Client) -> None:
    deadline = time.monotonic() + 60  # some CLIs take seconds to say their version
    executors = http.get("/api/executors").json()
    while any(e["installed"] is None for e in executors):
        assert time.monotonic() < deadline, executors
        time.sleep(0.2)
        executors = http.get("/api/executors").json()
    names = {e["name"] for e in executors}
    assert {"claude-code", "codex", "gemini"} <= names
    assert all(isinstance(e["installed"], bool) and "capabilities" in e for e in executors)
    installed = [e["installed"] for e in executors]
    assert installed == sorted(installed, reverse=True)  # installed ones first
    spec = http.get("/api/openapi.json").json()
    assert {"/api/tasks", "/api/tasks/{task_id}/stream", "/api/approvals/{approval_id}"} <= set(spec["paths"])
    answer = spec["components"]["schemas"]["Answer"]["properties"]
    assert {"decision", "updated_input", "for_session", "interrupt", "reason"} <= set(answer)


def test_the_board_stream_shows_every_change_and_resumes(http: httpx.Client, tmp_path: Path) -> None:
    board = Stream(http, "/api/stream")
    try:
        task_id = create(http, "plain", tmp_path)
        seen = board.until(lambda m: m.data["id"] == task_id and m.data["status"] == "done")
    finally:
        board.close()
    mine = [m for m in seen if m.data["id"] == task_id]
    assert mine[-1].event == "task" and mine[-1].id.isdigit()
    # Resume from the first change of the task: only later changes come, the last one included.
    first = mine[0]
    board = Stream(http, "/api/stream", {"last-event-id": str(first.id)})
    try:
        again = board.until(lambda m: m.data["id"] == task_id and m.data["status"] == "done")
    finally:
        board.close()
    assert all(m.id != first.id for m in again)
    keys = [int(m.id) for m in again]  # change numbers: rising, all after the one resumed from
    assert keys == sorted(set(keys)) and keys[0] > int(first.id)
    assert http.get("/api/stream", headers={"last-event-id": "nonsense"}).status_code == 422
    # A number this store never gave (the store was replaced under an open board): every task again.
    board = Stream(http, "/api/stream", {"last-event-id": str(int(mine[-1].id) + 10**9)})
    try:
        again = board.until(lambda m: m.data["id"] == task_id)
    finally:
        board.close()
    assert again[-1].data["status"] == "done"
