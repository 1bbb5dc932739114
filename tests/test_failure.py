"""A failed run says why in one line a person can act on, in the summary and in the jsonl result
line: the model unreachable, rate limited, the credentials refused, the CLI missing (with the npm
command that installs it).  The fake agent fails as the real Claude Code does (its words copied from
runs against the scripted model server); the classifier is also fed what Codex, Gemini and Qwen said
in the same runs; and one real CLI is pointed at a dead port and at a server answering 401."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from orchestrate.cli import main as cli_main
from orchestrate.cli.failure import classify, install_command
from orchestrate.entries import EntryMetadata, ErrorEntry, ErrorInfo, NormalizedEntry
from orchestrate.executors.claude_code import ClaudeCodeExecutor
from orchestrate.registry import default_registry
from orchestrate.run import RunResult

from .helpers import ROOT, needs_cli
from .test_cli import run_fake


@pytest.mark.parametrize(
    ("which", "kind", "first"),
    [
        ("401", "auth_required", "authentication required: Failed to authenticate. API Error: 401 nope"),
        ("429", "rate_limited", "rate limited: API Error: Request rejected (429)"),
        ("refused", "model_unreachable", "model unreachable: API Error: Connection refused"),
    ],
)
def test_the_reason_is_one_line_in_the_result_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str, kind: str, first: str
) -> None:
    monkeypatch.setenv("FAKE_API_ERROR", which)
    jsonl = run_fake(tmp_path, "--approvals", "auto", "--output", "jsonl", "api-error")
    result = orjson.loads(jsonl.stdout.splitlines()[-1])
    assert jsonl.returncode == result["exitCode"] == 1
    assert result["errorKind"] == kind and result["error"].startswith(first) and " — " in result["error"]
    assert "\n" not in result["error"]


def _error(message: str, code: str | None, **extra: Any) -> NormalizedEntry:
    return NormalizedEntry(
        index=0,
        timestamp=datetime.now(UTC),
        type=ErrorEntry(error=ErrorInfo(message=message, code=code)),
        content=message,
        metadata=EntryMetadata(extra=extra) if extra else None,
    )


def _failed(*errors: NormalizedEntry, stderr: str = "", outcome: str = "failed") -> RunResult:
    return RunResult(
        outcome=outcome,  # type: ignore[arg-type]
        exit_code=0,
        session_id=None,
        entries=list(errors),
        tool_results=[],
        token_usage={},  # type: ignore[arg-type]
        raw_log=None,
        stderr_tail=stderr,
    )


GEMINI_STACK = "\n".join(
    f"    at async Turn.run (file:///clis/gemini-cli/bundle/chunk.js:{n}:24)" for n in (308039, 401, 429)
)
RECONNECTING = {"details": "Connection failed: error sending request"}
# What the real CLIs said (tests of this file's header), as entries of our model.
SAID = [
    (
        "codex 401",
        [
            _error(
                "unexpected status 401 Unauthorized: scripted 401, url: http://127.0.0.1:1/v1/responses",
                "api_error",
                codex_error={"httpConnectionFailed": {"httpStatusCode": 401}},
            )
        ],
        "",
        "auth_required",
    ),
    (
        "codex 429",
        [
            _error(
                "exceeded retry limit, last status: 429 Too Many Requests",
                "api_error",
                codex_error={"responseTooManyFailedAttempts": {"httpStatusCode": 429}},
            )
        ],
        "",
        "rate_limited",
    ),
    (
        "codex dead server, stopped by our time limit",
        [
            _error("Reconnecting... waiting for network", "api_retry", **RECONNECTING),
            _error("Reconnecting... waiting for network", "api_retry", **RECONNECTING),
            _error("the run exceeded its time limit of 90 s", "timeout"),
            _error("The turn was interrupted", "interrupted"),
        ],
        "",
        "model_unreachable",
    ),
    (
        "gemini 401",
        [
            _error(
                'session/prompt failed: {"error":{"code":401,"message":"x","status":"UNAUTHENTICATED"}}',
                "api_error",
                rpc_error={"code": 401, "message": "x"},
            )
        ],
        "",
        "auth_required",
    ),
    (
        "gemini 429, retried out of sight",
        [_error("the run exceeded its time limit of 90 s", "timeout")],
        f"{GEMINI_STACK}\n{{\n  status: 429\n}}\n",
        "rate_limited",
    ),
    (
        "gemini dead server",
        [_error("the run exceeded its time limit of 90 s", "timeout")],
        "Attempt 2 failed. Retrying with backoff... Error: exception TypeError: fetch failed sending "
        f"request\n{GEMINI_STACK}\n",
        "model_unreachable",
    ),
    (
        "qwen 401",
        [
            _error(
                "session/prompt failed: 401 scripted 401",
                "api_error",
                rpc_error={"code": -32603, "message": "Internal error", "data": {"details": "401 x"}},
            )
        ],
        "",
        "auth_required",
    ),
    ("a stack trace's line numbers are no status", [_error("boom", "process_exited")], GEMINI_STACK, None),
    (
        "a protocol error after an old retry is its own reason",
        [_error("Reconnecting...", "api_retry", **RECONNECTING), _error("bad frame", "protocol_error")],
        "",
        None,
    ),
]


@pytest.mark.parametrize(("case", "errors", "stderr", "kind"), SAID, ids=[c[0] for c in SAID])
def test_what_each_cli_says_is_recognised(
    case: str, errors: list[NormalizedEntry], stderr: str, kind: str | None
) -> None:
    failure = classify(_failed(*errors, stderr=stderr))
    assert (failure.kind if failure else None) == kind, failure
    if failure is not None:
        assert "\n" not in failure.line and len(failure.line) < 320
    assert classify(_failed(*errors, stderr=stderr, outcome="success")) is None


def test_a_missing_cli_is_named_with_the_command_that_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("orchestrate.executors.base.find_program", lambda program: None)
    pins = json.loads((ROOT / "clis" / "package.json").read_text())["dependencies"]
    for name, package in (("claude-code", "@anthropic-ai/claude-code"), ("codex", "@openai/codex")):
        runner = CliRunner()
        text = runner.invoke(cli_main.main, ["run", "-e", name, "--approvals", "auto", "hi"])
        assert text.exit_code == 3
        expected = f"npm install -g {package}@{pins[package]}"
        assert f"CLI missing: {name} needs `" in text.output and expected in text.output, text.output
        args = ["run", "-e", name, "--approvals", "auto", "--output", "jsonl", "x"]
        jsonl = runner.invoke(cli_main.main, args)
        line = orjson.loads(jsonl.stdout.splitlines()[-1])
        assert jsonl.exit_code == line["exitCode"] == 3
        assert line["type"] == "result" and line["errorKind"] == "cli_missing" and expected in line["error"]


def test_every_npm_install_command_names_a_pinned_package() -> None:
    pins = json.loads((ROOT / "clis" / "package.json").read_text())["dependencies"]
    for name in default_registry.names():
        command = install_command(default_registry.get(name))
        if command is not None:
            package, _, version = command.removeprefix("npm install -g ").rpartition("@")
            assert pins.get(package) == version, (name, command)
    assert install_command(ClaudeCodeExecutor) is not None


# --- a real CLI ----------------------------------------------------------------------------------


def _real_claude(tmp_path: Path, base_url: str) -> dict[str, Any]:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (tmp_path / "tmp").mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HOME": str(home),
        "TMPDIR": str(tmp_path / "tmp"),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "ORCHESTRATE_HOME": str(tmp_path / "orchestrate"),
    }
    argv = [sys.executable, "-m", "orchestrate", "run", "-e", "claude-code", "--cwd", str(tmp_path)]
    done = subprocess.run(
        [*argv, "--approvals", "auto", "--output", "jsonl", "say hi"],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    return orjson.loads(done.stdout.splitlines()[-1]) | {"returncode": done.returncode}  # type: ignore[no-any-return]


@pytest.mark.real_cli
@needs_cli("claude")
def test_real_claude_against_a_dead_port_and_a_401(tmp_path: Path) -> None:
    import socket

    from orchestrate.testing.model_server import ScriptedModelServer
    from orchestrate.testing.scenario import Scenario

    with socket.socket() as s:  # a port nobody listens on: bound, never listened to
        s.bind(("127.0.0.1", 0))
        dead = _real_claude(tmp_path / "dead", f"http://127.0.0.1:{s.getsockname()[1]}")
    assert dead["errorKind"] == "model_unreachable" and dead["exitCode"] == dead["returncode"] == 1, dead
    steps = [{"error": {"status": 401, "type": "authentication_error", "message": "bad key"}}] * 3
    with ScriptedModelServer(Scenario.from_obj({"steps": steps})) as server:
        refused = _real_claude(tmp_path / "401", server.url)
    assert refused["errorKind"] == "auth_required" and "401" in refused["error"], refused
