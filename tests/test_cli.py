"""The `orchestrate` command, run as a real subprocess against the fake Claude CLI."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import orjson
import pytest

from orchestrate.entries import entry_json_schema
from orchestrate.registry import default_registry

from .helpers import FAKE_CLAUDE, FIXTURES, group_members, started_by_this_session

FAKE = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLAUDE))}"


def orchestrate(
    *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrate", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def run_fake(tmp_path: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return orchestrate(
        "run", "--executor", "claude-code", "--base-command", FAKE, "--cwd", str(tmp_path), *args, stdin=stdin
    )


def patches(stdout: str) -> list[dict[str, object]]:
    """The entry patches of `--output jsonl` (the result line that ends it left out)."""
    lines = [orjson.loads(line) for line in stdout.splitlines() if line.strip()]
    return [line for line in lines if line.get("type") != "result"]


def final_entries(stdout: str) -> list[dict[str, object]]:
    entries: dict[int, dict[str, object]] = {}
    for p in patches(stdout):
        entries[p["index"]] = p["entry"]  # type: ignore[index,assignment]
    return [entries[i] for i in sorted(entries)]


def test_run_jsonl_streams_patches_that_match_the_schema(tmp_path: Path) -> None:
    done = run_fake(tmp_path, "--approvals", "auto", "--output", "jsonl", "tool")
    assert done.returncode == 0, done.stderr
    validator = jsonschema.Draft202012Validator(entry_json_schema())
    lines = patches(done.stdout)
    for p in lines:
        validator.validate(p)
    assert {p["op"] for p in lines} == {"add", "replace"}
    tool = next(e for e in final_entries(done.stdout) if e["type"]["kind"] == "tool_use")  # type: ignore[index]
    assert tool["type"]["tool"]["status"] == "success"  # type: ignore[index]
    assert tool["type"]["tool"]["action"]["result"]["stdout"] == "ran: echo original"  # type: ignore[index]


def test_run_text_for_a_person(tmp_path: Path) -> None:
    done = run_fake(tmp_path, "--approvals", "deny", "tool")
    assert done.returncode == 0, done.stderr
    assert "⏺ Shell `echo original` denied" in done.stdout
    assert "tool done" in done.stdout and "success" in done.stderr


def test_prompt_from_stdin_and_env_override(tmp_path: Path) -> None:
    flags = ["--approvals", "deny", "--env", "FAKE_SECRET=xyz", "--output", "jsonl"]
    done = run_fake(tmp_path, *flags, "-", stdin="secret\n")
    assert done.returncode == 0, done.stderr
    assert any(e["content"] == "secret=xyz claudecode=<unset>" for e in final_entries(done.stdout))


def test_record_writes_a_replayable_raw_log(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    live = run_fake(tmp_path, "--approvals", "auto", "--record", str(log), "--output", "jsonl", "tool")
    assert live.returncode == 0, live.stderr
    replayed = orchestrate("replay", str(log), "--executor", "claude-code", "--output", "jsonl")
    assert replayed.returncode == 0, replayed.stderr
    assert final_entries(replayed.stdout) == final_entries(live.stdout)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--approvals", "deny", "crash"], 1),
        (["--approvals", "deny", "--timeout", "1", "hang"], 1),
        (["--approvals", "deny", "--resume", "missing", "plain"], 1),
    ],
)
def test_exit_codes_of_failed_runs(tmp_path: Path, args: list[str], code: int) -> None:
    done = run_fake(tmp_path, *args)
    assert done.returncode == code, done.stderr


def test_deny_and_interrupt_by_policy_file_exits_130(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('autonomy = "supervised"\n[allow]\ncommands = ["git *"]\n')
    done = run_fake(tmp_path, "--approvals", str(policy), "--output", "jsonl", "tool")
    assert done.returncode == 0
    tool = next(e for e in final_entries(done.stdout) if e["type"]["kind"] == "tool_use")  # type: ignore[index]
    assert tool["type"]["tool"]["status"] == "denied"  # type: ignore[index]
    assert "no policy rule allows Bash" in tool["type"]["tool"]["approval"]["reason"]  # type: ignore[index]


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    unknown = orchestrate("run", "--executor", "nope", "hi")
    assert (
        unknown.returncode == 2
        and "known executors: " + ", ".join(default_registry.names()) in unknown.stderr
        and "claude-code-tui, codex" in unknown.stderr
    )
    bad_env = run_fake(tmp_path, "--env", "NOEQUALS", "plain")
    assert bad_env.returncode == 2 and "KEY=VALUE" in bad_env.stderr
    bad_approvals = run_fake(tmp_path, "--approvals", "sometimes", "plain")
    assert bad_approvals.returncode == 2 and "policy file" in bad_approvals.stderr
    assert orchestrate("run", "hi").returncode == 2
    empty = run_fake(tmp_path, "--approvals", "deny", "-", stdin="  \n")
    assert empty.returncode == 2 and "no prompt on stdin" in empty.stderr
    blank = run_fake(tmp_path, "--approvals", "deny", " \t ")
    assert blank.returncode == 2 and "the prompt is empty" in blank.stderr


def test_unavailable_executor_exits_3(tmp_path: Path) -> None:
    missing = ["--base-command", "/nonexistent/claude"]
    done = orchestrate("run", "--executor", "claude-code", *missing, "--approvals", "deny", "hi")
    assert done.returncode == 3 and "could not start" in done.stderr


def test_sigint_interrupts_the_turn_and_exits_130(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrate",
            "run",
            "--executor",
            "claude-code",
            "--base-command",
            FAKE,
            "--record",
            str(log),
            "--approvals",
            "deny",
            "--output",
            "jsonl",
            "slow",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until the text streams
        if "w0 w1 w2" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupting" in err and "w49" not in out
    agent = orjson.loads(log.read_bytes().splitlines()[0])
    assert agent["executor"] == "claude-code"
    time.sleep(0.1)
    assert "aborted_streaming" in log.read_text()


def test_executors_lists_protocol_version_and_capabilities(monkeypatch: pytest.MonkeyPatch) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrate", "executors", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ORCHESTRATE_BIN_PATH": str(FAKE_CLAUDE.parent)},
    )
    assert done.returncode == 0, done.stderr
    rows = orjson.loads(done.stdout)
    assert [r["name"] for r in rows] == default_registry.names()  # all, even those needing --command
    [claude] = [r for r in rows if r["name"] == "claude-code"]
    [terminal] = [r for r in rows if r["name"] == "terminal"]
    assert terminal["installed"] is False and "--command" in terminal["reason"]
    assert claude["protocol"] == "stream-json"
    assert claude["capabilities"]["supportsApprovals"] is True
    assert claude["capabilities"]["supportsMidExecutionMessages"] is True
    text = orchestrate("executors")
    assert text.returncode == 0 and "claude-code" in text.stdout


def test_replay_of_a_plain_stdout_capture(tmp_path: Path) -> None:
    fixture = FIXTURES / "claude-stream-json" / "bash_approved.jsonl"
    stdout = b"".join(
        orjson.loads(line)["data"].encode()
        for line in fixture.read_bytes().splitlines()[1:]
        if orjson.loads(line).get("stream") == "stdout"
    )
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(stdout)
    done = orchestrate("replay", str(capture), "--executor", "claude-code", "--output", "jsonl")
    assert done.returncode == 0, done.stderr
    kinds = [e["type"]["kind"] for e in final_entries(done.stdout)]  # type: ignore[index]
    assert kinds == ["system_message", "assistant_message", "tool_use", "assistant_message", "token_usage"]
    text = orchestrate("replay", str(capture), "--executor", "claude-code")
    assert "Result: done" in text.stdout


def test_replay_errors(tmp_path: Path) -> None:
    assert orchestrate("replay", str(tmp_path / "missing"), "--executor", "claude-code").returncode == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"header","format":"orchestrate-rawlog","version":1}\n{"type":"chunk"}\n')
    done = orchestrate("replay", str(bad), "--executor", "claude-code", "--output", "jsonl")
    # A damaged line is an error entry, not the end of the replay; the exit code tells a script.
    assert done.returncode == 1 and "1 line(s) could not be read" in done.stderr
    (entry,) = final_entries(done.stdout)
    assert entry["type"]["error"]["code"] == "raw_log_damaged"  # type: ignore[index]
    assert "bad.jsonl:2 is not a raw log record" in entry["content"]  # type: ignore[operator]


def test_schema_command_prints_the_schema() -> None:
    done = orchestrate("schema")
    assert done.returncode == 0
    schema = orjson.loads(done.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert "toolName" in done.stdout and "exitCode" in done.stdout and "unifiedDiff" in done.stdout


def test_no_agent_process_survives_the_cli_tests() -> None:
    fakes = [
        p
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and _cmdline(p).count(str(FAKE_CLAUDE)) and started_by_this_session(p)
    ]
    assert [group_members(int(p.name)) for p in fakes] in ([], [[]] * len(fakes))


def _cmdline(p: Path) -> str:
    try:
        return (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_the_readme_embedding_example_runs(tmp_path: Path) -> None:
    readme = (FIXTURES.parent / "README.md").read_text()
    code = readme.split("## Embedding it", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.strip().splitlines()) <= 16
    shim = tmp_path / "bin" / "claude"  # the fake CLI stands in for `claude` on the bin path
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {FAKE} "$@"\n')
    shim.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ORCHESTRATE_BIN_PATH": str(shim.parent)},
        cwd=tmp_path,  # as pasted: it runs in the directory it is started in
    )
    assert done.returncode == 0, done.stderr
    assert "add 0 user_message add a health check endpoint" in done.stdout
    assert "\nsuccess " in done.stdout


def test_codex_run_and_replay_of_both_capture_formats(tmp_path: Path) -> None:
    from .helpers import FAKE_CODEX

    fake = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CODEX))}"
    done = orchestrate(
        "run",
        "--executor",
        "codex",
        "--base-command",
        fake,
        "--cwd",
        str(tmp_path),
        "--approvals",
        "auto",
        "command",
    )
    assert done.returncode == 0, done.stderr
    assert "⏺ Shell `touch x` success" in done.stdout and "approved with accept" in done.stdout
    for folder in ("codex-app-server", "codex-exec"):
        fixture = FIXTURES / folder / "plain_answer.jsonl"
        records = [orjson.loads(line) for line in fixture.read_bytes().splitlines()[1:]]
        capture = tmp_path / f"{folder}.jsonl"
        capture.write_text("".join(r["data"] for r in records if r.get("stream") == "stdout"))
        replayed = orchestrate("replay", str(capture), "--executor", "codex", "--output", "jsonl")
        assert replayed.returncode == 0, replayed.stderr
        texts = [
            e["content"] for e in final_entries(replayed.stdout) if e["type"]["kind"] == "assistant_message"
        ]  # type: ignore[index]
        assert texts == ["Hello from the scripted Codex model."], folder


def test_replay_finds_a_stored_run_by_id_and_its_executor_in_the_header(tmp_path: Path) -> None:
    live = run_fake(tmp_path, "--approvals", "auto", "--output", "jsonl", "tool")
    assert live.returncode == 0, live.stderr
    stored = orjson.loads(live.stdout.splitlines()[-1])  # the result line names the stored run
    by_id = orchestrate("replay", str(stored["runId"]), "--output", "jsonl")  # no --executor: the header's
    assert by_id.returncode == 0, by_id.stderr
    assert final_entries(by_id.stdout) == final_entries(live.stdout)
    assert any(e["type"]["kind"] == "tool_use" for e in final_entries(by_id.stdout))  # type: ignore[index]
    missing = orchestrate("replay", "999999")
    assert missing.returncode == 2 and "no run 999999" in missing.stderr


def test_replay_of_a_plain_capture_needs_an_executor(tmp_path: Path) -> None:
    capture = tmp_path / "capture.jsonl"
    capture.write_text('{"type":"system","subtype":"init","session_id":"s"}\n')
    done = orchestrate("replay", str(capture))
    assert done.returncode == 2 and "--executor" in done.stderr
    assert orchestrate("replay", "not-a-file-or-id").returncode == 2
