"""What we send Codex's app-server, and what we read from it, checked against the JSON Schema the
pinned CLI prints of its own protocol (`codex app-server generate-json-schema`)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from orchestrate import Task
from orchestrate.approvals import ApprovalDecision
from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.codex import CodexExecutor
from orchestrate.peers.codex_opening import CLIENT_INFO
from orchestrate.process.rawlog import read_raw_log
from orchestrate.run.codex import codex_decision

from .helpers import CLI_BIN, FIXTURES, needs_cli

CODEX = CLI_BIN / "codex"
pytestmark = [
    pytest.mark.real_cli,
    needs_cli("codex"),
]


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, jsonschema.Draft7Validator]:
    out = tmp_path_factory.mktemp("codex-schema")
    subprocess.run(
        [str(CODEX), "app-server", "generate-json-schema", "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    names = [
        "ClientRequest",
        "ClientNotification",
        "ServerRequest",
        "ServerNotification",
        "CommandExecutionRequestApprovalResponse",
        "FileChangeRequestApprovalResponse",
    ]
    return {n: jsonschema.Draft7Validator(orjson.loads((out / f"{n}.json").read_bytes())) for n in names}


def lines(stream: str) -> list[dict[str, Any]]:
    out = []
    for fixture in sorted((FIXTURES / "codex-app-server").glob("*.jsonl")):
        data = b"".join(r.data for r in read_raw_log(fixture)[1] if r.stream == stream)
        out += [orjson.loads(line) for line in data.splitlines() if line.strip()]
    return out


def check(validator: jsonschema.Draft7Validator, message: dict[str, Any]) -> None:
    errors = list(validator.iter_errors(message))
    assert not errors, f"{message.get('method')}: {errors[0].message}"


def test_our_requests_and_notifications(schema: dict[str, jsonschema.Draft7Validator]) -> None:
    sent = lines("stdin")
    requests = [m for m in sent if "method" in m and "id" in m]
    assert {m["method"] for m in requests} >= {
        "initialize",
        "thread/start",
        "thread/resume",
        "turn/start",
        "turn/interrupt",
    }
    for message in requests:
        check(schema["ClientRequest"], message)
    for message in (m for m in sent if "method" in m and "id" not in m):
        check(schema["ClientNotification"], message)


def test_our_approval_answers(schema: dict[str, jsonschema.Draft7Validator]) -> None:
    for decision in (
        ApprovalDecision.approve(),
        ApprovalDecision.approve(for_session=True),
        ApprovalDecision.deny("no"),
        ApprovalDecision.deny("no", interrupt=True),
        ApprovalDecision.timed_out(1),
    ):
        answer = {"decision": codex_decision(decision)}
        check(schema["CommandExecutionRequestApprovalResponse"], answer)
        check(schema["FileChangeRequestApprovalResponse"], answer)
    answers = [m["result"] for m in lines("stdin") if "result" in m]
    assert answers
    for answer in answers:
        check(schema["CommandExecutionRequestApprovalResponse"], answer)


def test_every_thread_request_we_can_build(
    schema: dict[str, jsonschema.Draft7Validator], tmp_path: Path
) -> None:
    options = ExecutorOptions(model="gpt-5.5", sandbox="read-only", approval_policy="on-request")
    for task in (
        Task(prompt="p", cwd=tmp_path),
        Task(prompt="p", cwd=tmp_path, resume="t1"),
        Task(prompt="p", cwd=tmp_path, resume="t1", fork=True),
    ):
        for executor in (CodexExecutor(), CodexExecutor(options)):
            method, params = executor.thread_request(task)
            check(schema["ClientRequest"], {"id": 1, "method": method, "params": params})
    check(
        schema["ClientRequest"],
        {
            "id": 1,
            "method": "initialize",
            "params": {"clientInfo": CLIENT_INFO, "capabilities": {"experimentalApi": False}},
        },
    )


def test_what_we_read_is_what_the_schema_says(schema: dict[str, jsonschema.Draft7Validator]) -> None:
    received = lines("stdout")
    notifications = [m for m in received if "method" in m and "id" not in m]
    requests = [m for m in received if "method" in m and "id" in m]
    assert len(notifications) > 100 and requests
    for message in notifications:
        check(schema["ServerNotification"], message)
    for message in requests:
        check(schema["ServerRequest"], message)
