"""Claude Code (`@anthropic-ai/claude-code`), over two-way stream-json with its control channel."""

from __future__ import annotations

import os

from .base import Capabilities, Executor

# Not typing's, nor pathlib at the top: this module is loaded before `orchestrate run` spawns its
# agent (cli/early.py), and they cost ~3 and ~5 ms there.  (mypy takes any TYPE_CHECKING as true.)
TYPE_CHECKING = False
if TYPE_CHECKING:  # loaded when first used: a run starts the CLI before it needs them
    from typing import Any, ClassVar

    from ..approvals.base import ApprovalRequest
    from ..normalizers.claude_stream_json import ClaudeStreamJsonNormalizer
    from ..peers.claude_control import CanUseTool
    from ..task import Task

__all__ = ["ClaudeCodeExecutor"]

_PATH_KEYS = ("file_path", "notebook_path", "path")
_normalizer_class: type[ClaudeStreamJsonNormalizer] | None = None  # (see create_normalizer)

UNASKED_TOOLS = "EnterWorktree,ExitWorktree,CronCreate,CronDelete,ScheduleWakeup"
"""Tools Claude Code (2.1.330) runs in its default mode without asking its host, that change
something: EnterWorktree makes a git worktree and branch, CronCreate writes a durable schedule to
.claude/scheduled_tasks.json.  They would bypass the approval pipeline (and act on a prompt written
before the run adopted the process: cli/early.py), so no run offers them."""


class ClaudeCodeExecutor(Executor):
    name = "claude-code"
    protocol = "stream-json"
    program = "claude"
    npm_package = "@anthropic-ai/claude-code"
    install_hint = "Install it with: npm install @anthropic-ai/claude-code"
    capabilities: ClassVar[Capabilities] = Capabilities(
        protocol="stream-json",
        session_resume=True,
        fork=True,
        approvals=True,
        mcp=True,
        mid_execution_messages=True,
        interrupt=True,
        requires_setup=True,
    )

    def build_argv(self, task: Task) -> list[str]:
        argv = [
            *self.base_command(),
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-prompt-tool",
            "stdio",
            "--include-partial-messages",
            "--disallowedTools",
            UNASKED_TOOLS,
        ]
        model = task.model or self.options.model
        if model:
            argv += ["--model", model]
        if self.options.permission_mode:
            argv += ["--permission-mode", self.options.permission_mode]
        if task.resume:
            argv.append(f"--resume={task.resume}")
            if task.fork:
                argv.append("--fork-session")
        return argv + list(self.options.extra_args)

    def env_additions(self, task: Task) -> dict[str, str]:
        # Session-state frames ("idle") tell us for sure when every queued message has been handled.
        env = {"CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS": "1"}
        if os.geteuid() == 0 and self.options.permission_mode == "bypassPermissions":
            env["IS_SANDBOX"] = "1"  # the CLI refuses bypass as root otherwise (2.1.330)
        return env

    def credentials(self) -> tuple[bool | None, str | None]:
        env = self.credential_env()
        found = self.credentials_in(
            env, ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
        )
        if found:
            return found
        if env.get("CLAUDE_CODE_USE_BEDROCK") or env.get("CLAUDE_CODE_USE_VERTEX"):
            return True, "a cloud provider ($CLAUDE_CODE_USE_BEDROCK / _VERTEX)"
        from pathlib import Path

        config = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else Path.home() / ".claude"
        return self.credentials_in(env, (), (config / ".credentials.json",)) or (False, None)

    def create_normalizer(self) -> ClaudeStreamJsonNormalizer:
        # (The class is imported on first use and kept: a relative import statement costs about
        # 2 µs each time it runs, as much as the normalizer it makes, and a replay of many short
        # runs makes one per run.)
        global _normalizer_class
        cls = _normalizer_class
        if cls is None:
            from ..normalizers.claude_stream_json import ClaudeStreamJsonNormalizer

            cls = _normalizer_class = ClaudeStreamJsonNormalizer
        return cls()

    def approval_request(self, event: CanUseTool, task: Task, session_id: str | None) -> ApprovalRequest:
        """A ``can_use_tool`` request in the approval service's terms."""
        from ..approvals.base import ApprovalRequest
        from ..approvals.tools import is_read_only_tool

        args: dict[str, Any] = event.input
        paths = [str(args[k]) for k in _PATH_KEYS if isinstance(args.get(k), str)]
        paths += [
            str(e["file_path"]) for e in args.get("edits") or [] if isinstance(e, dict) and "file_path" in e
        ]
        if event.blocked_path and event.blocked_path not in paths:
            paths.append(event.blocked_path)
        command = args.get("command") if event.tool_name == "Bash" else None
        return ApprovalRequest(
            request_id=event.request_id,
            tool_name=event.tool_name,
            tool_input=args,
            tool_call_id=event.tool_use_id,
            context=event.description,
            command=command if isinstance(command, str) else None,
            paths=tuple(paths),
            read_only=is_read_only_tool(event.tool_name),  # our table, never the agent's word
            executor=self.name,
            session_id=session_id,
            cwd=str(task.cwd),
            editable=True,  # the CLI runs the tool with the updatedInput we answer with
        )
