from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from orchestrate import Task, UnknownExecutorError, get_executor
from orchestrate.errors import ConfigError, ExecutorUnavailableError
from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.claude_code import ClaudeCodeExecutor
from orchestrate.peers.claude_control import CanUseTool
from orchestrate.registry import Registry

from .helpers import fake_claude


def test_argv_carries_every_option(tmp_path: Path) -> None:
    executor = ClaudeCodeExecutor(
        ExecutorOptions(
            base_command="npx -y @anthropic-ai/claude-code@2.1.330",
            model="sonnet",
            permission_mode="acceptEdits",
            extra_args=["--max-turns", "3"],
        )
    )
    argv = executor.build_argv(Task(prompt="p", cwd=tmp_path, resume="abc", fork=True))
    assert argv[:3] == ["npx", "-y", "@anthropic-ai/claude-code@2.1.330"]
    assert argv[3:11] == [
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-prompt-tool",
        "stdio",
        "--include-partial-messages",
    ]
    assert argv[11:13] == [
        "--disallowedTools",
        "EnterWorktree,ExitWorktree,CronCreate,CronDelete,ScheduleWakeup",
    ]
    assert argv[13:] == [
        "--model",
        "sonnet",
        "--permission-mode",
        "acceptEdits",
        "--resume=abc",
        "--fork-session",
        "--max-turns",
        "3",
    ]
    task_model = executor.build_argv(Task(prompt="p", cwd=tmp_path, model="haiku"))
    assert task_model[task_model.index("--model") + 1] == "haiku"


def test_environment_of_the_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDECODE", "1")
    monkeypatch.setenv("KEEP", "me")
    executor = fake_claude(env={"ADDED": "1", "KEEP": "executor"})
    env = executor.process_spec(Task(prompt="p", cwd=tmp_path, env={"KEEP": "task"})).env
    assert "CLAUDECODE" not in env
    assert (env["ADDED"], env["KEEP"], env["CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS"]) == ("1", "task", "1")


def test_missing_cli_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ORCHESTRATE_BIN_PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(ExecutorUnavailableError, match="npm install @anthropic-ai/claude-code"):
        ClaudeCodeExecutor().build_argv(Task(prompt="p", cwd=tmp_path))
    availability = anyio.run(ClaudeCodeExecutor().check_availability)
    assert not availability.installed and "not found" in (availability.reason or "")


def test_availability_reports_the_version() -> None:
    availability = anyio.run(fake_claude().check_availability)
    assert (availability.installed, availability.version) == (True, "0.0-fake")
    assert availability.path == sys.executable


def test_approval_request_names_command_and_paths(tmp_path: Path) -> None:
    executor = ClaudeCodeExecutor()
    task = Task(prompt="p", cwd=tmp_path)
    bash = executor.approval_request(
        CanUseTool("r", "Bash", {"command": "ls"}, "t", "List", "/w/x"), task, "s"
    )
    assert (bash.command, bash.paths, bash.read_only, bash.session_id) == ("ls", ("/w/x",), False, "s")
    edit = executor.approval_request(
        CanUseTool("r", "MultiEdit", {"file_path": "/w/a", "edits": []}, "t", None, None), task, None
    )
    assert (edit.command, edit.paths) == (None, ("/w/a",))
    read = executor.approval_request(
        CanUseTool("r", "Read", {"file_path": "/w/a"}, "t", None, None), task, None
    )
    assert read.read_only


def test_registry_lookup_and_unknown_names() -> None:
    assert isinstance(get_executor("claude-code"), ClaudeCodeExecutor)
    with pytest.raises(
        UnknownExecutorError,
        match="known executors: acp, claude-code, claude-code-acp, claude-code-tui, codex, codex-acp, "
        "codex-exec, copilot, cursor, cursor-acp, droid, gemini, opencode, qwen, "
        "terminal",
    ):
        get_executor("nope")


class PluginExecutor(ClaudeCodeExecutor):
    name = "plugin-agent"


class FakeEntryPoint:
    def __init__(self, name: str, target: object) -> None:
        self.name, self.value, self.dist = name, f"tests:{name}", None
        self._target = target

    def load(self) -> object:
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


def test_entry_point_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    points = [
        FakeEntryPoint("plugin-agent", PluginExecutor),
        FakeEntryPoint("broken", ImportError("boom")),
        FakeEntryPoint("blocked-agent", PluginExecutor),
        FakeEntryPoint("not-an-executor", object),
    ]
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: points)
    registry = Registry(blocked={"blocked-agent"})
    registry.register(ClaudeCodeExecutor)
    with pytest.warns(RuntimeWarning) as warned:
        names = registry.names()
    assert names == ["claude-code", "plugin-agent"]
    assert len(warned) == 2  # the broken plugin and the non-executor, each named
    assert registry.sources["plugin-agent"] == "tests:plugin-agent"
    with pytest.raises(ConfigError):
        registry.register(object)  # type: ignore[arg-type]


def test_codex_argv_in_both_modes(tmp_path: Path) -> None:
    from orchestrate.executors.codex import CodexExecExecutor, CodexExecutor
    from orchestrate.executors.config import parse_config_overrides

    config = parse_config_overrides(
        ['model_reasoning_effort="high"', "features.web_search=true", "raw=not toml"]
    )
    assert config == {"model_reasoning_effort": "high", "features": {"web_search": True}, "raw": "not toml"}
    options = ExecutorOptions(
        base_command="codex",
        model="gpt-5.5",
        sandbox="read-only",
        config=config,
        mcp_servers={"files": {"command": "npx", "args": ["-y", "server"]}},
    )
    overrides = [
        "-c",
        'model_reasoning_effort="high"',
        "-c",
        "features.web_search=true",
        "-c",
        'raw="not toml"',
        "-c",
        'mcp_servers.files.command="npx"',
        "-c",
        'mcp_servers.files.args=["-y","server"]',
    ]
    assert CodexExecutor(options).build_argv(Task(prompt="p", cwd=tmp_path)) == [
        "codex",
        "app-server",
        *overrides,
    ]
    exec_argv = CodexExecExecutor(options).build_argv(Task(prompt="p", cwd=tmp_path, resume="t1"))
    assert exec_argv == [
        "codex",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "-s",
        "read-only",
        "-m",
        "gpt-5.5",
        *overrides,
        "resume",
        "t1",
        "-",
    ]
    method, params = CodexExecutor(options).thread_request(
        Task(prompt="p", cwd=tmp_path, resume="t1", fork=True)
    )
    assert (method, params["threadId"], params["sandbox"], params["model"]) == (
        "thread/fork",
        "t1",
        "read-only",
        "gpt-5.5",
    )
    assert (
        not CodexExecExecutor.capabilities.approvals
        and not CodexExecExecutor.capabilities.mid_execution_messages
    )
    assert CodexExecutor.capabilities.approvals and CodexExecutor.capabilities.mid_execution_messages


def test_config_override_errors(tmp_path: Path) -> None:
    from orchestrate.executors.config import load_mcp_servers, parse_config_overrides

    with pytest.raises(ConfigError):
        parse_config_overrides(["novalue"])
    with pytest.raises(ConfigError):
        parse_config_overrides(["a=1", "a.b=2"])
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"x": {"command": "run-x"}}}')
    assert load_mcp_servers(path) == {"x": {"command": "run-x"}}
    path.write_text("[1]")
    with pytest.raises(ConfigError):
        load_mcp_servers(path)


def test_codex_credentials_without_the_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrate.executors.codex import CodexExecutor

    for name in ("OPENAI_API_KEY", "CODEX_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CODEX_HOME", str(tmp_path))
    assert CodexExecutor().credentials() == (False, None)
    (tmp_path / "config.toml").write_text(
        'model_provider = "local"\n[model_providers.local]\nbase_url = "http://x"\nenv_key = "LOCAL_KEY"\n'
    )
    assert CodexExecutor().credentials() == (False, None)  # the provider's key is not set
    monkeypatch.setenv("LOCAL_KEY", "k")
    assert CodexExecutor().credentials()[0] is True
    monkeypatch.delenv("LOCAL_KEY")
    (tmp_path / "auth.json").write_text("{}")
    assert CodexExecutor().credentials() == (True, str(tmp_path / "auth.json"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk")
    assert CodexExecutor().credentials() == (True, "$OPENAI_API_KEY")


def test_claude_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CODE_USE_BEDROCK",
        "CLAUDE_CODE_USE_VERTEX",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    assert ClaudeCodeExecutor().credentials() == (False, None)
    (tmp_path / ".credentials.json").write_text("{}")
    assert ClaudeCodeExecutor().credentials()[0] is True
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    assert ClaudeCodeExecutor().credentials() == (True, "$ANTHROPIC_API_KEY")


def test_acp_agents_credentials_and_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrate.executors.acp import AcpExecutor, GeminiExecutor, QwenExecutor

    for name in (
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_GEMINI_BASE_URL",
        "OPENAI_API_KEY",
        "DASHSCOPE_API_KEY",
        "QWEN_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert GeminiExecutor().credentials() == (False, None)
    assert QwenExecutor().credentials() == (False, None)
    (tmp_path / ".qwen").mkdir()
    (tmp_path / ".qwen" / "settings.json").write_text('{"security": {"auth": {"apiKey": "k"}}}')
    assert QwenExecutor().credentials()[0] is True
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    assert GeminiExecutor().credentials() == (True, "$GEMINI_API_KEY")
    assert GeminiExecutor(ExecutorOptions(base_command="gemini")).build_argv(
        Task(prompt="p", cwd=tmp_path, model="gemini-2.5-flash")
    ) == ["gemini", "--acp", "-m", "gemini-2.5-flash"]
    assert QwenExecutor(ExecutorOptions(base_command="qwen")).build_argv(Task(prompt="p", cwd=tmp_path)) == [
        "qwen",
        "--acp",
    ]
    with pytest.raises(ExecutorUnavailableError, match="--command"):
        AcpExecutor().build_argv(Task(prompt="p", cwd=tmp_path))
    assert (
        GeminiExecutor().auth_method([{"id": "gemini-api-key"}], {"GEMINI_API_KEY": "k"}) == "gemini-api-key"
    )
    assert QwenExecutor().auth_method([{"id": "openai"}], {}) is None


def test_gemini_moves_a_session_file_the_load_would_clobber(tmp_path: Path) -> None:
    from datetime import datetime

    from orchestrate.executors.acp import GeminiExecutor
    from orchestrate.process.pipes import ProcessSpec

    chats = tmp_path / ".gemini" / "tmp" / "work" / "chats"
    chats.mkdir(parents=True)
    now = datetime.now().strftime("%Y-%m-%dT%H-%M")
    session = chats / f"session-{now}-abcdef12.jsonl"
    session.write_text("{}")
    spec = ProcessSpec(["gemini"], tmp_path, {"HOME": str(tmp_path)})
    done = GeminiExecutor().prepare(spec, Task(prompt="p", cwd=tmp_path, resume="abcdef12-0000"))
    if datetime.now().strftime("%Y-%m-%dT%H-%M") == now:  # (the minute may have turned meanwhile)
        assert len(done) == 1 and not session.exists()
        [moved] = list(chats.iterdir())
        assert moved.name.endswith("-abcdef12.jsonl") and moved.read_text() == "{}"
    assert GeminiExecutor().prepare(spec, Task(prompt="p", cwd=tmp_path)) == []
