"""Cursor: the executor against the fake `cursor-agent` (the real one cannot be installed here), its
up-front policy flags, the `agent` name, and the normalizer on the documented stream's awkward parts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from orchestrate import AutoApprove, AutoDeny, Task
from orchestrate.approvals import RulePolicy, SessionMemory, TerminalPrompt
from orchestrate.errors import ConfigError, ExecutorUnavailableError
from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.cursor import CursorExecutor
from orchestrate.normalizers.cursor_jsonl import CursorNormalizer

from .helpers import FAKE_CURSOR, errors, run_agent, texts

pytestmark = pytest.mark.anyio


def fake_cursor(**options: Any) -> CursorExecutor:
    return CursorExecutor(ExecutorOptions(base_command=[sys.executable, str(FAKE_CURSOR)], **options))


def test_no_live_approvals_so_the_policy_becomes_flags(tmp_path: Path) -> None:
    cursor = fake_cursor()
    assert (
        not CursorExecutor.capabilities.approvals and not CursorExecutor.capabilities.mid_execution_messages
    )
    assert cursor.policy_args(SessionMemory(AutoApprove())) == ["--force"]
    assert cursor.policy_args(AutoDeny()) == ["--mode", "plan"]
    assert cursor.policy_args(RulePolicy.from_dict({"autonomy": "readonly"})) == ["--mode", "plan"]
    assert cursor.policy_args(RulePolicy.from_dict({"autonomy": "full"})) == ["--force"]
    assert cursor.policy_args(TerminalPrompt()) == []
    argv = cursor.process_spec(
        Task(prompt="p", cwd=tmp_path, model="gpt-5", resume="chat1"), AutoApprove()
    ).argv
    assert argv[2:] == [
        "-p",
        "--output-format",
        "stream-json",
        "--stream-partial-output",
        "--trust",
        "--model",
        "gpt-5",
        "--resume",
        "chat1",
        "--force",
    ]


def test_the_agent_name_is_used_only_when_it_is_cursors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = sys.executable
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    agent = bin_dir / "agent"
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("ORCHESTRATE_BIN_PATH", str(bin_dir))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    agent.write_text("#!/bin/sh\necho 'some other agent tool'\n")
    agent.chmod(0o755)
    with pytest.raises(ExecutorUnavailableError):
        CursorExecutor().base_command()
    agent.write_text(f'#!/bin/sh\nexec {python} {FAKE_CURSOR} "$@"\n')
    assert CursorExecutor().base_command() == [str(agent)]


async def test_a_turn_with_partial_output_is_not_doubled(tmp_path: Path) -> None:
    result, run = await run_agent(fake_cursor(), tmp_path, "plain", AutoApprove())
    assert result.outcome == "success" and result.final_text == "Hello from fake cursor."
    assert texts(result, "user_message") == ["plain"]
    assert result.token_usage.cache_read_tokens == 40 and result.session_id
    with pytest.raises((ConfigError, Exception)):
        await run.send_message("more")


async def test_resume_and_failures(tmp_path: Path) -> None:
    resumed, _ = await run_agent(fake_cursor(), tmp_path, "plain again", resume="chat-7")
    assert resumed.final_text == "Resumed chat chat-7" and resumed.session_id == "chat-7"
    auth, _ = await run_agent(fake_cursor(), tmp_path, "auth")
    assert auth.outcome == "failed" and errors(auth)[0][0] == "auth_required"
    cut, _ = await run_agent(fake_cursor(), tmp_path, "no-result")
    assert cut.outcome == "failed" and [c for c, _ in errors(cut)] == ["process_exited"]
    assert "connection lost" in cut.stderr_tail


def lines(*events: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(e) + b"\n" for e in events)


def assistant(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}, **extra}


@pytest.mark.parametrize(
    "events",
    [
        # deltas, then a cumulative copy with the call id, then one without
        [
            assistant("Hel", timestamp_ms=1),
            assistant("lo", timestamp_ms=2),
            assistant("Hello", model_call_id="m"),
            assistant("Hello"),
        ],
        # segments without partial output: one line, nothing to fix
        [assistant("Hello")],
        # cumulative copies that grow
        [assistant("He"), assistant("Hell"), assistant("Hello")],
        # a delta repeating the tail, marked as a delta: it is text
        [assistant("Hel", timestamp_ms=1), assistant("l", timestamp_ms=2), assistant("o", timestamp_ms=3)],
    ],
)
def test_assistant_text_in_every_documented_form(events: list[dict[str, Any]]) -> None:
    n = CursorNormalizer()
    n.feed(lines(*events))
    n.finish()
    assert [e.content for e in n.entries if e.type.kind == "assistant_message"] == ["Hello"]


def test_a_plain_capture_that_ends_without_a_result() -> None:
    n = CursorNormalizer()
    n.feed(
        lines({"type": "system", "subtype": "init", "model": "Auto", "session_id": "s"}, assistant("Working"))
    )
    n.finish()
    assert n.outcome == "failed" and n.entries[-1].type.error.code == "process_exited"  # type: ignore[union-attr]


def tool_call(subtype: str, kind: str, args: dict[str, Any], **body: Any) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "subtype": subtype,
        "call_id": "c1",
        "tool_call": {kind: {"args": args, **body}},
    }


@pytest.mark.parametrize(
    ("started", "completed"),
    [
        ({"path": "/w/a.txt"}, {"path": "/w/b.txt"}),
        # equal in Python (1 == 1.0 == True), not on the wire: shown as the completion says
        ({"path": 1}, {"path": True}),
        ({"path": 1}, {"path": 1.0}),
        ({"path": "/w/a.txt", "x": 1}, {"x": 1, "path": "/w/a.txt"}),
    ],
)
@pytest.mark.parametrize("kind", ["readToolCall", "deleteToolCall", "grepToolCall", "semSearchToolCall"])
def test_a_completion_with_other_arguments_is_shown_as_they_say(
    kind: str, started: dict[str, Any], completed: dict[str, Any]
) -> None:
    """The completion of a call reuses the started call's action only when it was built from the
    very same arguments; else it is built again, as if the start had never been seen."""
    system = {"type": "system", "subtype": "init", "model": "m", "cwd": "/w"}
    done = tool_call("completed", kind, completed, result={"success": {}})
    both, alone = CursorNormalizer(), CursorNormalizer()
    both.feed(lines(system, tool_call("started", kind, started), done))
    alone.feed(lines(system, done))
    assert [e.to_json_dict() for e in both.entries] == [e.to_json_dict() for e in alone.entries]
    assert both.entries[-1].type.tool.status == "success"  # type: ignore[union-attr]


def test_a_completion_after_the_directory_changed_is_described_in_the_new_one() -> None:
    def system(cwd: str) -> dict[str, Any]:
        return {"type": "system", "subtype": "init", "model": "m", "cwd": cwd}

    args = {"path": "/w/sub/a.txt"}
    n = CursorNormalizer()
    n.feed(lines(system("/w"), tool_call("started", "readToolCall", args)))
    assert n.entries[-1].content == "`sub/a.txt`"
    n.feed(lines(system("/w/sub"), tool_call("completed", "readToolCall", args, result={"success": {}})))
    tool = n.entries[1]
    assert tool.type.kind == "tool_use" and tool.content == "`a.txt`"
