"""Attacks on `orchestrate run`'s early write (cli/early.py, run/early_opening.py,
executors/claude_asks.py): ways Claude Code could act, without asking us, on a prompt written before
the run adopted it (and so before the run could still be refused)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from orchestrate.cli import early
from orchestrate.executors.claude_asks import always_asks
from orchestrate.executors.claude_code import ClaudeCodeExecutor
from orchestrate.executors.options import ExecutorOptions
from orchestrate.peers.claude_opening import ClaudeOpening
from orchestrate.run.early_opening import early_opening
from orchestrate.task import Task

from .helpers import CLI_BIN, needs_cli

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the early start's supervisor: Linux")

_ALLOW_TOUCH = orjson.dumps({"permissions": {"allow": ["Bash(touch:*)"]}})


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """As in test_early_write.py: our own `claude` on $ORCHESTRATE_BIN_PATH, a HOME without Claude
    settings, the work directory tmp_path/work; orchestrate itself runs in tmp_path/elsewhere."""
    for sub in ("bin", "home", "work", "elsewhere"):
        (tmp_path / sub).mkdir()
    program = tmp_path / "bin" / "claude"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("ORCHESTRATE_BIN_PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ORCHESTRATE_STORE", "off")
    monkeypatch.setenv("ORCHESTRATE_EARLY", "write")
    monkeypatch.chdir(tmp_path / "elsewhere")
    return tmp_path


def run_args(home: Path, *more: str) -> list[str]:
    return ["run", "-e", "claude-code", "--cwd", str(home / "work"), "--approvals", "deny", *more]


def opening_for(args: list[str]) -> ClaudeOpening | str:
    made = early._early(args)
    assert made is not None, args  # the agent is started early either way
    return early_opening(*made)


# --- a slash command is run by the CLI itself, not by a tool that asks -----------------------------


@pytest.mark.parametrize("prompt", ["/evil", "/evil now", "/heapdump", "/config"])
def test_no_early_write_of_a_slash_command(home: Path, prompt: str) -> None:
    """Claude Code runs a prompt that starts with ``/`` as a command without asking anyone: a
    project command's ``!`` lines under its own ``allowed-tools`` (measured with 2.1.330: `touch`
    ran, no can_use_tool), or a built-in that writes (``/heapdump`` writes a heap snapshot into
    HOME).  Written before adoption, a refused run's agent would have changed something."""
    assert isinstance(opening_for([*run_args(home), prompt]), str)


def test_a_prompt_with_a_slash_inside_is_still_written_early(home: Path) -> None:
    assert isinstance(opening_for([*run_args(home), "fix a/b and /tmp"]), ClaudeOpening)


@pytest.mark.real_cli
@needs_cli("claude")
def test_the_real_claude_runs_no_project_command_before_adoption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pinned Claude Code, started early for the prompt ``/evil`` where the project's command
    ``evil`` runs ``touch pwned`` under its own ``allowed-tools``: left unadopted, nothing is
    created (the prompt is the run's to write, after adoption)."""
    from orchestrate.testing import Scenario, ScriptedModelServer
    from orchestrate.testing.offline import Scratch, claude_offline_env

    with (
        Scratch.create() as scratch,
        ScriptedModelServer(Scenario.from_obj({"steps": [{"text": "ok"}]})) as server,
    ):
        commands = scratch.work / ".claude" / "commands"
        commands.mkdir(parents=True)
        (commands / "evil.md").write_text(
            "---\nallowed-tools: Bash(touch:*)\ndescription: x\n---\n!`touch pwned`\nsay ok\n"
        )
        for name, value in claude_offline_env(server, scratch).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("ORCHESTRATE_BIN_PATH", str(CLI_BIN))
        args = ["run", "-e", "claude-code", "--cwd", str(scratch.work), "--approvals", "deny", "/evil"]
        started = early.begin(args)
        assert started is not None
        try:
            deadline = time.monotonic() + 4.0  # the CLI ran the command within 1 s when sent it
            while time.monotonic() < deadline and not (scratch.work / "pwned").exists():
                time.sleep(0.05)
            assert not (scratch.work / "pwned").exists(), "the project command ran before adoption"
        finally:
            early.discard()


# --- settings the CLI finds relative to its own working directory ---------------------------------


@pytest.mark.parametrize("variable", ["CLAUDE_CONFIG_DIR", "HOME"])
def test_a_relative_config_dir_is_read_where_the_agent_runs(home: Path, variable: str) -> None:
    """A relative $CLAUDE_CONFIG_DIR or $HOME is resolved by Claude Code against its own working
    directory (--cwd), not orchestrate's (measured: a `touch` allowed in work/cfg/settings.json ran
    without asking, the early write made).  The check must read that file."""
    folder = home / "work" / "cfg"
    if variable == "HOME":
        folder = folder / ".claude"
    folder.mkdir(parents=True)
    (folder / "settings.json").write_bytes(_ALLOW_TOUCH)
    assert isinstance(opening_for([*run_args(home, "--env", f"{variable}=cfg"), "hi"]), str)


def test_no_home_variable_means_the_account_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without $HOME the CLI's home is the account's (getpwuid), whose settings it reads: the check
    must read them too, not skip the user settings."""
    import pwd

    account = home / "account"
    (account / ".claude").mkdir(parents=True)
    (account / ".claude" / "settings.json").write_bytes(_ALLOW_TOUCH)
    real = pwd.getpwuid

    def getpwuid(uid: int) -> Any:
        entry = list(real(uid))
        entry[5] = str(account)
        return pwd.struct_passwd(entry)

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    program = str(home / "bin" / "claude")
    argv = [program, *ClaudeCodeExecutor(ExecutorOptions()).build_argv(Task(prompt="p", cwd=home))[1:]]
    assert always_asks(argv, {"HOME": str(account)}, home / "work", program) is not None  # (as given)
    assert always_asks(argv, {}, home / "work", program) is not None


def _git(*args: str) -> None:
    subprocess.run(
        ["git", *args],
        check=True,
        capture_output=True,
        timeout=30,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "a",
            "GIT_AUTHOR_EMAIL": "a@b",
            "GIT_COMMITTER_NAME": "a",
            "GIT_COMMITTER_EMAIL": "a@b",
        },
    )


@pytest.mark.parametrize("name", ["settings.local.json", "settings.json"])
def test_a_linked_worktree_reads_the_main_trees_settings(home: Path, name: str) -> None:
    """In a linked git worktree Claude Code reads the local settings of the main work tree, which is
    not a parent of the worktree (measured: a `touch` allowed in main/.claude/settings.local.json
    ran without asking in the worktree, the early write made)."""
    main, linked = home / "main", home / "linked"
    main.mkdir()
    _git("init", "-q", str(main))
    _git("-C", str(main), "commit", "-q", "--allow-empty", "-m", "x")
    _git("-C", str(main), "worktree", "add", "-q", str(linked))
    args = ["run", "-e", "claude-code", "--cwd", str(linked / "sub"), "--approvals", "deny", "hi"]
    (linked / "sub").mkdir()
    assert isinstance(opening_for(args), ClaudeOpening)  # nothing loose yet
    (main / ".claude").mkdir()
    (main / ".claude" / name).write_bytes(_ALLOW_TOUCH)
    assert isinstance(opening_for(args), str)


# --- tools the CLI runs without asking ------------------------------------------------------------


def test_the_tools_claude_runs_without_asking_are_not_offered(home: Path) -> None:
    """Claude Code 2.1.330 runs EnterWorktree (a git worktree and branch) and CronCreate (a durable
    schedule in .claude/scheduled_tasks.json) without asking its host: every run disallows them, and
    a command line that offers them again gets no early write."""
    program = str(home / "bin" / "claude")
    argv = [program, *ClaudeCodeExecutor(ExecutorOptions()).build_argv(Task(prompt="p", cwd=home))[1:]]
    at = argv.index("--disallowedTools")
    assert {"EnterWorktree", "CronCreate", "CronDelete"} <= set(argv[at + 1].split(","))
    env = {"HOME": str(home / "home")}
    assert always_asks(argv, env, home / "work", program) is None
    without = argv[:at] + argv[at + 2 :]
    assert always_asks(without, env, home / "work", program) is not None
    fewer = [*argv[: at + 1], "CronCreate", *argv[at + 2 :]]
    assert always_asks(fewer, env, home / "work", program) is not None


@pytest.mark.real_cli
@needs_cli("claude")
@pytest.mark.parametrize("tool", ["CronCreate", "EnterWorktree"])
def test_the_real_claude_changes_nothing_unasked_before_adoption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    """The pinned Claude Code, sent its prompt early and left unadopted while its model calls a tool
    the CLI runs without asking: no durable schedule is written, no worktree or branch is made."""
    from orchestrate.testing import Scenario, ScriptedModelServer
    from orchestrate.testing.offline import Scratch, claude_offline_env

    steps: list[dict[str, Any]] = {
        "CronCreate": [
            {"tool": {"name": "ToolSearch", "input": {"query": "select:CronCreate", "max_results": 5}}},
            {
                "tool": {
                    "name": "CronCreate",
                    "input": {
                        "cron": "*/5 * * * *",
                        "prompt": "touch pwned",
                        "recurring": True,
                        "durable": True,
                    },
                }
            },
        ],
        "EnterWorktree": [{"tool": {"name": "EnterWorktree", "input": {"name": "wt1"}}}],
    }[tool]
    with (
        Scratch.create() as scratch,
        ScriptedModelServer(Scenario.from_obj({"steps": [*steps, {"text": "done"}]})) as server,
    ):
        _git("init", "-q", str(scratch.work))
        _git("-C", str(scratch.work), "commit", "-q", "--allow-empty", "-m", "x")
        for name, value in claude_offline_env(server, scratch).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("ORCHESTRATE_BIN_PATH", str(CLI_BIN))
        monkeypatch.setenv("ORCHESTRATE_EARLY", "write")
        args = ["run", "-e", "claude-code", "--cwd", str(scratch.work), "--approvals", "deny", "go"]
        started = early.begin(args)
        assert started is not None and started.was_written
        try:
            deadline = time.monotonic() + 30
            while len(server.main_requests()) <= len(steps):  # each tool call done, answered back
                assert time.monotonic() < deadline, "the CLI never got through its tool calls"
                time.sleep(0.05)
            assert not (scratch.work / ".claude" / "scheduled_tasks.json").exists()
            assert not (scratch.work / ".claude" / "worktrees").exists()
            branches = subprocess.run(
                ["git", "-C", str(scratch.work), "branch", "--list"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert "worktree-" not in branches.stdout
        finally:
            early.discard()


# --- the check itself is bounded ------------------------------------------------------------------


def test_a_settings_file_that_blocks_does_not_hang_the_start(home: Path) -> None:
    """A settings file that is a FIFO (a link to a terminal alike) blocked the early check's read
    for ever, before the CLI had even loaded (measured: `orchestrate run` hung, ORCHESTRATE_EARLY=0
    did not).  It is not a plain file: no early write, at once."""
    import threading

    settings = home / "work" / ".claude" / "settings.json"
    settings.parent.mkdir()
    os.mkfifo(settings)
    answers: list[Any] = []
    worker = threading.Thread(
        target=lambda: answers.append(opening_for([*run_args(home), "hi"])), daemon=True
    )
    worker.start()
    worker.join(5)
    blocked = worker.is_alive()
    if blocked:  # let the stuck reader go
        os.close(os.open(settings, os.O_WRONLY | os.O_NONBLOCK))
    assert not blocked, "the early check blocked on a settings file"
    assert isinstance(answers[0], str) and "not a plain file" in answers[0]
