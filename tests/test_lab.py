"""The conformance lab's commands: record, model-server, upgrade (conformance itself: test_conformance.py)."""

from __future__ import annotations

import http.client
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from .helpers import FIXTURES, ROOT, needs_cli


def orchestrate(
    *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrate", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def test_model_server_command_serves_until_stopped(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("steps:\n  - text: served\n")
    port_file, log = tmp_path / "port", tmp_path / "requests.jsonl"
    argv = [
        sys.executable,
        "-m",
        "orchestrate",
        "model-server",
        "--scenario",
        str(scenario),
        "--port-file",
        str(port_file),
        "--log",
        str(log),
    ]
    with subprocess.Popen(argv, stderr=subprocess.DEVNULL) as proc:
        try:
            for _ in range(400):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.05)
            body = {"model": "m", "tools": [{"name": "x"}], "messages": [{"role": "user", "content": "hi"}]}
            connection = http.client.HTTPConnection("127.0.0.1", int(port_file.read_text()), timeout=10)
            try:
                connection.request(
                    "POST", "/v1/messages", json.dumps(body), {"content-type": "application/json"}
                )
                reply = json.loads(connection.getresponse().read())
            finally:
                connection.close()
            assert reply["content"][0]["text"] == "served"
            assert json.loads(log.read_text().splitlines()[0])["body"]["messages"][0]["content"] == "hi"
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0


@pytest.mark.real_cli
@needs_cli("claude")
def test_record_writes_a_scrubbed_fixture_and_its_entries(tmp_path: Path) -> None:
    out = tmp_path / "plain.jsonl"
    done = orchestrate(
        "record",
        "--executor",
        "claude-code",
        "--scenario",
        str(FIXTURES / "scenarios" / "claude-code" / "plain_answer.json"),
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "/scratch/work" in text and not re.search(r"(?<![\w./-])/tmp/", text) and str(ROOT) not in text
    assert "00000000-0000-4000-8000-000000000001" in text  # the session id, made stable
    entries = orjson.loads(out.with_suffix(".entries.json").read_bytes())
    assert [e["type"]["kind"] for e in entries] == [
        "user_message",
        "system_message",
        "assistant_message",
        "token_usage",
    ]


@pytest.mark.real_cli
@needs_cli("codex")
def test_upgrade_rerecords_and_shows_what_changed(tmp_path: Path) -> None:
    cases = ["plain_answer", "command_declined", "apply_patch_add"]
    (tmp_path / "fixtures" / "scenarios" / "codex").mkdir(parents=True)
    (tmp_path / "fixtures" / "codex-app-server").mkdir()
    for case in cases:
        shutil.copy(FIXTURES / "scenarios" / "codex" / f"{case}.json", tmp_path / "fixtures/scenarios/codex")
        for suffix in (".jsonl", ".entries.json"):
            shutil.copy(
                FIXTURES / "codex-app-server" / f"{case}{suffix}", tmp_path / "fixtures/codex-app-server"
            )
    # As if the last recording had seen another answer: the upgrade must say what moved.
    expected = tmp_path / "fixtures/codex-app-server/plain_answer.entries.json"
    expected.write_text(
        expected.read_text().replace("Hello from the scripted Codex model.", "Hello from before.")
    )
    done = orchestrate(
        "upgrade", "--executor", "codex", "--no-install", "--pins", str(ROOT / "clis"), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "command_declined: unchanged" in done.stdout and "apply_patch_add: unchanged" in done.stdout
    assert "plain_answer: CHANGED" in done.stdout
    assert '-{"content":"Hello from before."' in done.stdout
    assert '+{"content":"Hello from the scripted Codex model."' in done.stdout
    assert done.stdout.strip().endswith("2 unchanged, 1 changed: review the .entries.json diffs, then commit")
