"""What `orchestrate` prints for a person and for a program: tools named by what they do whichever agent
ran them, noise folded into one quiet line, long output folded (and whole with --verbose), diffs in
colour, a failed run's summary without markup, the jsonl result line, -h and the help's examples, and an
error that names a missing working directory rather than the agent's program."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import anyio
import orjson
import pytest
from rich.console import Console

from orchestrate import AutoApprove, Run, Task
from orchestrate.cli.names import display_name, mcp_name
from orchestrate.cli.render import TextRenderer
from orchestrate.entries import (
    CommandResult,
    CommandRun,
    EntryMetadata,
    EntryPatch,
    FileChange,
    FileEdit,
    FileWrite,
    GenericTool,
    NormalizedEntry,
    Search,
    SystemMessage,
    TaskAction,
    ToolUse,
    ToolUseEntry,
    WebFetch,
)
from orchestrate.errors import SpawnError

from .helpers import FAKE_ACP, fake_claude
from .test_cli import orchestrate, run_fake

MCP = "mcp: github/create_issue"


@pytest.mark.parametrize(
    ("agent_name", "action", "shown"),
    [
        ("Bash", CommandRun(command="ls"), "Shell"),
        ("commandExecution", CommandRun(command="ls"), "Shell"),
        ("run_shell_command", CommandRun(command="ls"), "Shell"),
        ("Edit", FileEdit(path="a.py"), "Edit"),
        ("fileChange", FileEdit(path="a.py"), "Edit"),
        ("fileChange", FileEdit(path="a.py", changes=(FileChange(type="delete"),)), "Delete"),
        ("write_file", FileWrite(path="a.py"), "Write"),
        ("Grep", Search(query="x"), "Search"),
        ("webSearch", Search(query="x"), "Search"),
        ("WebFetch", WebFetch(url="https://x"), "Fetch"),
        ("Task", TaskAction(description="look"), "Task"),
        ("mcp__github__create_issue", GenericTool(tool_name="mcp__github__create_issue"), MCP),
        ("mcp:github/create_issue", GenericTool(tool_name="mcp:github/create_issue"), MCP),
        ("mcp:github:create_issue", GenericTool(tool_name="mcp:github:create_issue"), MCP),
        ("think", GenericTool(tool_name="think"), "think"),
    ],
)
def test_tools_are_named_by_what_they_do(agent_name: str, action: object, shown: str) -> None:
    tool = ToolUseEntry(tool_name=agent_name, action=action)  # type: ignore[arg-type]
    assert display_name(tool) == shown
    # Verbose: the agent's own name too, when it differs.
    assert display_name(tool, verbose=True) == (shown if shown == agent_name else f"{shown} ({agent_name})")


def test_mcp_names_of_other_tools_are_not_mistaken() -> None:
    assert mcp_name("mcp_helper") is None and mcp_name("Bash") is None
    assert mcp_name("mcp__my_server__do__it") == "mcp: my_server/do__it"


def _patch(index: int, type_: object, content: str = "", **extra: object) -> EntryPatch:
    entry = NormalizedEntry(
        index=index,
        timestamp=datetime.now(UTC),
        type=type_,  # type: ignore[arg-type]
        content=content,
        metadata=EntryMetadata(extra=extra) if extra else None,
    )
    return EntryPatch(op="add", index=index, entry=entry)


def _render(patches: list[EntryPatch], verbose: bool = False, color: bool = False) -> str:
    out = io.StringIO()
    colors = "standard" if color else None
    console = Console(file=out, width=100, highlight=False, force_terminal=color, color_system=colors)
    renderer = TextRenderer(console, verbose)
    for p in patches:
        renderer.on_patch(p)
    renderer.finish()
    return out.getvalue()


NOISE = [
    _patch(0, SystemMessage(), "Session `s` started"),
    _patch(1, SystemMessage(), "49 commands available: /a, /b", commands=[f"c{i}" for i in range(49)]),
    _patch(2, SystemMessage(), "Mode: default"),
    _patch(3, SystemMessage(), "`config/changed` notification", raw={}),
    _patch(4, SystemMessage(), "Permission mode set to plan"),
]


def test_noise_is_folded_into_one_quiet_line() -> None:
    shown = _render(NOISE).splitlines()
    assert shown == [
        "Session `s` started",
        "· 49 commands available · mode default · config/changed notification · mode plan",
    ]
    # Verbose: each on its own line, whole.
    assert _render(NOISE, verbose=True).splitlines() == [p.entry.content for p in NOISE]


def _tool(status: str, action: object, name: str = "Bash", content: str = "`x`") -> EntryPatch:
    tool = ToolUseEntry(tool_name=name, action=action, status=status)  # type: ignore[arg-type]
    return _patch(7, ToolUse(tool=tool), content)


def test_long_output_is_folded_and_verbose_shows_it_whole() -> None:
    output = "".join(f"line {i}\n" for i in range(40))
    done = _tool("success", CommandRun(command="x", result=CommandResult(exit_code=0, stdout=output)))
    folded = _render([done])
    assert "line 11" in folded and "line 12" not in folded
    assert "  │ … 28 more lines (--verbose shows them)" in folded
    whole = _render([done], verbose=True)
    assert "line 39" in whole and "more lines" not in whole and "⏺ Shell (Bash) `x` success" in whole


def test_diffs_are_coloured_as_diffs_and_agent_text_is_never_markup() -> None:
    diff = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-old [red]\n+new [/]\n"
    edit = FileEdit(path="f", changes=(FileChange(unified_diff=diff),))
    shown = _render([_tool("success", edit, "Edit", "`f`")], color=True)
    assert "\x1b[32m+new [/]" in shown and "\x1b[31m-old [red]" in shown and "\x1b[36m@@ -1 +1 @@" in shown


def test_a_failed_runs_summary_has_no_markup(tmp_path: Path) -> None:
    done = run_fake(tmp_path, "--approvals", "auto", "crash")
    assert done.returncode == 1
    assert "[red]" not in done.stderr and "[/]" not in done.stderr
    assert re.search(r"^failed  session ", done.stderr, re.M), done.stderr
    assert "\x1b" not in done.stdout + done.stderr  # not a terminal: plain lines


def test_jsonl_ends_with_a_result_line(tmp_path: Path) -> None:
    done = run_fake(tmp_path, "--approvals", "auto", "--output", "jsonl", "tool")
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert all("op" in line for line in lines[:-1])
    result = lines[-1]
    assert set(result) == {
        "type", "outcome", "exitCode", "agentExitCode", "sessionId", "error", "errorKind", "usage", "costUsd",
        "durationMs", "rawLog", "taskId", "runId",
    }  # fmt: skip
    assert result["type"] == "result" and result["outcome"] == "success"
    assert result["exitCode"] == done.returncode == 0
    assert result["sessionId"] == lines[-2]["entry"]["metadata"]["sessionId"]
    assert result["usage"]["inputTokens"] == 10 and result["costUsd"] == 0.001
    assert Path(result["rawLog"]).is_file() and result["durationMs"] > 0
    failed = run_fake(tmp_path, "--approvals", "auto", "--output", "jsonl", "crash")
    last = orjson.loads(failed.stdout.splitlines()[-1])
    assert last["outcome"] == "failed" and last["exitCode"] == failed.returncode == 1 and last["error"]
    assert last["errorKind"] is None  # a crash is none of the reasons a person can act on


def test_h_is_help_and_help_has_examples() -> None:
    for args in (["-h"], ["run", "-h"], ["replay", "-h"]):
        done = orchestrate(*args)
        assert done.returncode == 0 and "Usage:" in done.stdout, args
    assert "Examples:" in orchestrate("-h").stdout
    run_help = orchestrate("run", "--help").stdout
    assert "Examples:" in run_help and "orchestrate run -e claude-code" in run_help
    assert "--verbose" in run_help and "result line" in run_help


def test_an_empty_prompt_is_a_usage_error_and_nothing_starts(tmp_path: Path) -> None:
    done = run_fake(tmp_path, "--approvals", "auto", "--record", str(tmp_path / "log.jsonl"), "   ")
    assert done.returncode == 2 and "the prompt is empty" in done.stderr
    assert not (tmp_path / "log.jsonl").exists()


def test_a_missing_working_directory_is_named_as_the_cause(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"

    async def go() -> None:
        async with Run(fake_claude(), Task(prompt="plain", cwd=missing), AutoApprove()) as run:
            await run.wait()

    with pytest.raises(SpawnError) as caught:
        anyio.run(go)
    assert "working directory" in str(caught.value) and str(missing) in str(caught.value)
    assert sys.executable not in str(caught.value).split(":", 1)[1]  # the program is not blamed


def _run_acp(tmp_path: Path, *args: str, no_usage: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FAKE_ACP_NO_USAGE": "1" if no_usage else "0"}
    command = f"{sys.executable} {FAKE_ACP}"
    argv = [sys.executable, "-m", "orchestrate", "run", "-e", "acp", "--command", command]
    argv += ["--cwd", str(tmp_path), "--approvals", "auto", *args, "plain"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def test_usage_an_agent_does_not_report_is_said_so_not_zero(tmp_path: Path) -> None:
    silent = _run_acp(tmp_path, no_usage=True)
    assert silent.returncode == 0, silent.stderr
    assert "tokens: not reported" in silent.stderr and "0 in, 0 out" not in silent.stdout + silent.stderr
    assert "tokens:" not in silent.stdout  # no per-turn line saying nothing
    line = orjson.loads(_run_acp(tmp_path, "--output", "jsonl", no_usage=True).stdout.splitlines()[-1])
    assert line["type"] == "result" and line["usage"] is None and line["costUsd"] is None
    # The same agent reporting its usage: the numbers.
    line = orjson.loads(_run_acp(tmp_path, "--output", "jsonl", no_usage=False).stdout.splitlines()[-1])
    assert line["usage"]["inputTokens"] == 10 and line["usage"]["cacheReadTokens"] == 2


def test_help_puts_the_lab_commands_apart_from_the_everyday_ones() -> None:
    shown = orchestrate("--help").stdout
    sections = re.split(r"^(\S[^\n]*):\n", shown, flags=re.M)
    by_title = {sections[i]: sections[i + 1] for i in range(1, len(sections) - 1, 2)}
    listed = {title: re.findall(r"^  (\S+)  ", body, re.M) for title, body in by_title.items()}
    assert {"run", "executors"} <= set(listed["Commands"])
    lab = next(names for title, names in listed.items() if title.startswith("Lab"))
    assert {"replay", "record", "conformance", "model-server", "demo"} <= set(lab)
    assert not set(lab) & set(listed["Commands"])
    assert {"submit", "worker", "approve"} <= set(listed["Task queue"])
    assert shown.index("Commands:") < shown.index("Task queue:") < shown.index("Lab")
