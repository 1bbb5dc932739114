"""Zed's ACP adapters around other agents: ``claude-agent-acp`` (Claude Code through its agent SDK,
npm ``@zed-industries/claude-agent-acp``) and ``codex-acp`` (Codex, ``@zed-industries/codex-acp``).
Neither exits when its input closes once a session exists (protocols/more-agents.md §5): the run
closes the session and stops them itself."""

from __future__ import annotations

import os

from .acp import LOADS_AND_RESUMES, AcpExecutor
from .base import Availability, Capabilities
from .codex import config_overrides

# Loaded before `orchestrate run` spawns its agent (cli/early.py builds the command line with
# process_spec): what only `orchestrate check` needs (anyio, subprocess, json, pathlib) is
# imported where it is used, and typing not at all (~3 ms; mypy takes any TYPE_CHECKING as true).
# tests/test_early_executors.py holds it so.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import ClassVar

    from ..task import Task

__all__ = ["ClaudeCodeAcpExecutor", "CodexAcpExecutor"]


class _Adapter(AcpExecutor):
    exits_at_end_of_input = False
    capabilities: ClassVar[Capabilities] = LOADS_AND_RESUMES

    async def check_availability(self) -> Availability:
        """Neither adapter has ``--version`` (one starts its ACP server, the other refuses the
        flag): the version is the one of the npm package the program belongs to."""
        import subprocess
        from pathlib import Path

        import anyio

        try:
            argv = self.base_command()
        except Exception as exc:  # ExecutorUnavailableError: not installed
            return Availability(self.name, False, reason=str(getattr(exc, "reason", exc)))
        try:
            with anyio.fail_after(20):
                done = await anyio.run_process(
                    [*argv, "--help"], check=False, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
        except (OSError, TimeoutError) as exc:
            return Availability(self.name, False, path=argv[0], reason=f"cannot run {argv[0]}: {exc}")
        if done.returncode != 0:
            return Availability(self.name, False, path=argv[0], reason=f"--help exited {done.returncode}")
        has, source = self.credentials()
        return Availability(
            self.name,
            True,
            version=_package_version(Path(argv[-1] if argv[0].endswith("node") else argv[0])),
            path=argv[0],
            credentials=has,
            credentials_source=source,
        )


class ClaudeCodeAcpExecutor(_Adapter):
    name = "claude-code-acp"
    program = "claude-agent-acp"
    npm_package = "@zed-industries/claude-agent-acp"
    install_hint = "Install it with: npm install @zed-industries/claude-agent-acp"

    def env_additions(self, task: Task) -> dict[str, str]:
        env = {"DISABLE_AUTOUPDATER": "1"}
        # The adapter starts Claude Code with --allow-dangerously-skip-permissions, which Claude Code
        # refuses as root unless told it is in a sandbox: every session/new then fails with "Query
        # closed before response received" (protocols/more-agents.md §5).  The flag only allows the
        # bypass mode; the run still asks every permission through its pipeline.
        if os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"
        return env

    def credentials(self) -> tuple[bool | None, str | None]:
        from pathlib import Path

        env = self.credential_env()
        config = Path(env.get("CLAUDE_CONFIG_DIR") or self.home(env) / ".claude")
        variables = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
        return self.credentials_in(env, variables, (config / ".credentials.json",)) or (False, None)


class CodexAcpExecutor(_Adapter):
    name = "codex-acp"
    program = "codex-acp"
    npm_package = "@zed-industries/codex-acp"
    install_hint = "Install it with: npm install @zed-industries/codex-acp"

    def build_argv(self, task: Task) -> list[str]:
        # Codex's own configuration overrides (-c key=value), as the codex executors take them; the
        # model is picked through the session's config options like every ACP agent's.
        overrides = config_overrides(self.options.config, {})
        return [*self.base_command(), *overrides, *self.options.extra_args]

    def credentials(self) -> tuple[bool | None, str | None]:
        from pathlib import Path

        env = self.credential_env()
        home = Path(env.get("CODEX_HOME") or self.home(env) / ".codex")
        found = self.credentials_in(env, ("OPENAI_API_KEY", "CODEX_API_KEY"), (home / "auth.json",))
        if found:
            return found
        config = home / "config.toml"
        try:
            text = config.read_text(encoding="utf-8")
        except OSError:
            return False, None
        # A model provider of one's own, with its key in the variable it names (env_key).
        return (True, str(config)) if "model_provider" in text else (False, None)


def _package_version(program: Path) -> str | None:
    """The version in the package.json of the npm package ``program`` lies in."""
    import json

    for parent in program.resolve().parents:
        manifest = parent / "package.json"
        if manifest.is_file():
            try:
                version = json.loads(manifest.read_text(encoding="utf-8")).get("version")
            except (OSError, ValueError, AttributeError):
                return None
            return str(version) if version else None
    return None
