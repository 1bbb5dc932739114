"""The named ACP executors: command lines, environment, credentials and availability, and Cursor
over ACP end to end against a fake that follows Cursor's documented behaviour.  The real CLIs run in
the conformance matrix (test_conformance.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from orchestrate import AutoApprove, AutoDeny, Task, get_executor
from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.cursor_acp import CursorAcpExecutor
from orchestrate.executors.zed import ClaudeCodeAcpExecutor, CodexAcpExecutor

from .helpers import FIXTURES, run_agent, texts

pytestmark = pytest.mark.anyio

FAKE_CURSOR_ACP = FIXTURES / "bin" / "fake_cursor_acp.py"
NAMES = ("opencode", "copilot", "droid", "claude-code-acp", "codex-acp", "cursor-acp")


def task(tmp_path: Path, **kw: object) -> Task:
    return Task(prompt="p", cwd=tmp_path, **kw)  # type: ignore[arg-type]


def test_every_named_executor_is_registered_as_an_acp_agent() -> None:
    for name in NAMES:
        executor = get_executor(name, ExecutorOptions(base_command=["x"]))
        assert executor.name == name and executor.protocol == "acp"
        assert executor.capabilities.approvals and executor.capabilities.session_resume


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("opencode", ["x", "acp"]),
        ("copilot", ["x", "--acp", "--model", "m1"]),
        ("droid", ["x", "exec", "-o", "acp"]),  # -m is ignored in ACP mode: a config option instead
        ("claude-code-acp", ["x"]),
        ("cursor-acp", ["x", "acp"]),
    ],
)
def test_command_lines(tmp_path: Path, name: str, argv: list[str]) -> None:
    executor = get_executor(name, ExecutorOptions(base_command=["x"]))
    assert executor.build_argv(task(tmp_path, model="m1")) == argv


def test_codex_acp_takes_codex_config_overrides(tmp_path: Path) -> None:
    executor = CodexAcpExecutor(
        ExecutorOptions(base_command=["x"], config={"model_reasoning_effort": "high"})
    )
    assert executor.build_argv(task(tmp_path)) == ["x", "-c", 'model_reasoning_effort="high"']


def test_opencode_runs_in_the_task_directory_and_asks_before_shell_and_edits(tmp_path: Path) -> None:
    spec = get_executor("opencode", ExecutorOptions(base_command=["x"])).process_spec(task(tmp_path))
    assert spec.env["PWD"] == str(tmp_path)  # `opencode run` takes its project from $PWD
    permission = json.loads(spec.env["OPENCODE_CONFIG_CONTENT"])["permission"]
    assert permission["bash"] == "ask" and permission["edit"] == "ask"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root needs it")
def test_claude_code_acp_as_root_is_told_it_is_in_a_sandbox(tmp_path: Path) -> None:
    spec = ClaudeCodeAcpExecutor(ExecutorOptions(base_command=["x"])).process_spec(task(tmp_path))
    assert spec.env["IS_SANDBOX"] == "1"


def test_adapters_that_linger_are_marked() -> None:
    lingering = {n for n in NAMES if not get_executor(n).exits_at_end_of_input}  # type: ignore[attr-defined]
    assert lingering == {"claude-code-acp", "codex-acp"}


def test_droid_credentials_need_a_factory_key_even_with_a_custom_model(tmp_path: Path) -> None:
    (tmp_path / ".factory").mkdir()
    (tmp_path / ".factory" / "settings.json").write_text('{"customModels": [{"model": "m"}]}')
    bare = get_executor("droid", ExecutorOptions(env={"HOME": str(tmp_path), "FACTORY_API_KEY": ""}))
    has, why = bare.credentials()
    assert has is False and why and "FACTORY_API_KEY" in why
    keyed = get_executor("droid", ExecutorOptions(env={"HOME": str(tmp_path), "FACTORY_API_KEY": "fk"}))
    assert keyed.credentials() == (True, "$FACTORY_API_KEY")


def test_opencode_credentials_from_its_auth_file_or_a_provider_of_ones_own(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "d"),
        "XDG_CONFIG_HOME": str(tmp_path / "c"),
    }
    clean = dict.fromkeys(
        (
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "OPENROUTER_API_KEY",
            "GEMINI_API_KEY",
            "GOOGLE_GENERATIVE_AI_API_KEY",
            "GROQ_API_KEY",
            "XAI_API_KEY",
        ),
        "",
    )
    executor = get_executor("opencode", ExecutorOptions(env={**env, **clean}))
    assert executor.credentials() == (False, None)
    (tmp_path / "c" / "opencode").mkdir(parents=True)
    (tmp_path / "c" / "opencode" / "opencode.json").write_text('{"provider": {"mine": {}}}')
    assert executor.credentials()[0] is True
    (tmp_path / "d" / "opencode").mkdir(parents=True)
    (tmp_path / "d" / "opencode" / "auth.json").write_text("{}")
    assert executor.credentials() == (True, str(tmp_path / "d" / "opencode" / "auth.json"))


def test_copilot_version_line() -> None:
    assert get_executor("copilot").parse_version("GitHub Copilot CLI 1.0.102.") == "1.0.102"


async def test_an_adapter_without_version_flag_reads_its_package_version(tmp_path: Path) -> None:
    package = tmp_path / "node_modules" / "@zed-industries" / "codex-acp"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text('{"name": "@zed-industries/codex-acp", "version": "9.8.7"}')
    program = package / "bin" / "codex-acp"
    program.write_text('#!/bin/sh\n[ "$1" = --help ] && exit 0\nexit 2\n')
    program.chmod(0o755)
    found = await CodexAcpExecutor(ExecutorOptions(base_command=[str(program)])).check_availability()
    assert found.installed and found.version == "9.8.7"
    program.write_text("#!/bin/sh\nexit 3\n")
    broken = await CodexAcpExecutor(ExecutorOptions(base_command=[str(program)])).check_availability()
    assert not broken.installed and "exited 3" in (broken.reason or "")
    missing = await CodexAcpExecutor(
        ExecutorOptions(base_command=[str(tmp_path / "nope")])
    ).check_availability()
    assert not missing.installed


# --- Cursor over ACP, against the faithful fake --------------------------------------------------


def cursor() -> CursorAcpExecutor:
    return CursorAcpExecutor(ExecutorOptions(base_command=[sys.executable, str(FAKE_CURSOR_ACP)]))


async def test_cursor_acp_signs_in_with_cursor_login_and_answers(tmp_path: Path) -> None:
    result, run = await run_agent(cursor(), tmp_path, "plain")
    assert result.outcome == "success" and result.final_text == "hello from fake acp"
    assert run.capabilities.requires_setup  # it advertised an auth method
    assert result.error is None  # it signs in first, as Cursor documents: no refused session/new
    assert result.raw_log is not None and r"\"methodId\":\"cursor_login\"" in result.raw_log.read_text()


@pytest.mark.parametrize(("approvals", "status"), [(AutoApprove(), "success"), (AutoDeny("no"), "denied")])
async def test_cursor_acp_permissions_by_their_kinds_not_their_ids(
    tmp_path: Path, approvals: object, status: str
) -> None:
    result, _ = await run_agent(cursor(), tmp_path, "permission", approvals)  # type: ignore[arg-type]
    [tool] = result.tool_results
    assert tool.status == status
    assert result.final_text == (
        "allowed with allow-once" if status == "success" else "rejected with reject-once"
    )


async def test_cursor_acp_model_through_its_config_option(tmp_path: Path) -> None:
    result, _ = await run_agent(cursor(), tmp_path, "model?", model="smart")
    assert result.final_text == "model=smart"


async def test_cursor_acp_extension_requests_are_answered_never_left_hanging(tmp_path: Path) -> None:
    # Every turn of the fake blocks on a cursor/ask_question request until the client answers it.
    result, _ = await run_agent(cursor(), tmp_path, "plain", within=15)
    assert "The agent asked `cursor/ask_question`, which this client does not serve" in texts(
        result, "system_message"
    )
    assert result.outcome == "success"
