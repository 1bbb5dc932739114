"""Agents that speak the Agent Client Protocol: Gemini CLI, Qwen Code, and any other by its command."""

from __future__ import annotations

import os

from .base import Capabilities, Executor

# Loaded before `orchestrate run` spawns its agent (cli/early.py builds the command line with
# process_spec): what only the run, a replay or `orchestrate check` needs (the normalizer and its
# entry model, json, pathlib, datetime) is imported where it is used, and typing not at all (~3 ms;
# mypy takes any TYPE_CHECKING as true).  tests/test_early_executors.py holds it so.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar

    from ..normalizers.acp import AcpNormalizer
    from ..normalizers.base import Normalizer
    from ..process.spec import ProcessSpec
    from ..task import Task

__all__ = ["LOADS_AND_RESUMES", "AcpExecutor", "GeminiExecutor", "QwenExecutor", "is_jsonrpc"]


class AcpExecutor(Executor):
    """Any ACP agent, given its command (``--base-command``).  What it can do is read from its
    ``initialize`` answer when the run starts (``Run.capabilities``); the class declares what every
    ACP agent has."""

    name = "acp"
    protocol = "acp"
    program = ""
    install_hint = (
        "Any ACP agent: give its command with --command (e.g. 'npx @zed-industries/claude-code-acp')."
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        protocol="acp",
        session_resume=False,
        fork=False,
        approvals=True,
        mcp=True,
        mid_execution_messages=True,
        interrupt=True,
        requires_setup=True,
    )
    acp_flags: ClassVar[tuple[str, ...]] = ()
    missing_file_reads_empty: ClassVar[bool] = False
    """Answer a read of a missing file with empty text instead of an error (Gemini needs it to write
    new files through the client: protocols/acp-gemini-qwen.md §5)."""

    def build_argv(self, task: Task) -> list[str]:
        argv = [*self.base_command(), *self.acp_flags]
        model = task.model or self.options.model
        if model and self.model_flag:
            argv += [self.model_flag, model]
        return argv + list(self.options.extra_args)

    model_flag: ClassVar[str | None] = None
    """The flag that picks the model; without one the run picks it through the session's config
    options (``session/set_config_option``, or the older ``session/set_model``)."""
    authenticate_first: ClassVar[bool] = False
    """Call ``authenticate`` (with :meth:`auth_method`'s choice) before opening a session, for an
    agent whose documented flow asks for it (Cursor), instead of only after a refusal."""
    exits_at_end_of_input: ClassVar[bool] = True
    """False for an agent that stays alive when its input closes (the Zed adapters): the run then
    closes its session and stops it with SIGTERM itself, and does not count that as a failure."""

    def create_normalizer(self) -> AcpNormalizer:
        from ..normalizers.acp import AcpNormalizer

        return AcpNormalizer()

    def mcp_servers(self) -> list[dict[str, Any]]:
        """MCP servers in ACP's form: {name, command, args, env: [{name, value}]} or {name, type, url}."""
        out = []
        for name, spec in self.options.mcp_servers.items():
            if "url" in spec:
                headers = [{"name": k, "value": str(v)} for k, v in (spec.get("headers") or {}).items()]
                out.append(
                    {"type": spec.get("type", "http"), "name": name, "url": spec["url"], "headers": headers}
                )
            else:
                env = [{"name": k, "value": str(v)} for k, v in (spec.get("env") or {}).items()]
                out.append(
                    {
                        "name": name,
                        "command": spec.get("command", ""),
                        "args": list(spec.get("args") or []),
                        "env": env,
                    }
                )
        return out

    def auth_method(self, methods: list[dict[str, Any]], env: dict[str, str]) -> str | None:
        """Which of the agent's auth methods to use when it asks for authentication (None: none fits)."""
        return None

    def run_env(self, task: Task) -> dict[str, str]:
        return {**os.environ, **self.options.env, **task.env}


def is_jsonrpc(first_line: bytes) -> bool:
    """Whether a capture's first line is ACP's JSON-RPC (else it is the CLI's other format)."""
    return b'"jsonrpc"' in first_line[:4096]


# Agents that implement session/load or session/resume: what the generic ACP agent cannot promise.
LOADS_AND_RESUMES = AcpExecutor.capabilities.replace(session_resume=True)
_LOADS_SESSIONS = LOADS_AND_RESUMES


class GeminiExecutor(AcpExecutor):
    name = "gemini"
    program = "gemini"
    npm_package = "@google/gemini-cli"
    install_hint = "Install it with: npm install @google/gemini-cli"
    acp_flags = ("--acp",)
    model_flag = "-m"
    missing_file_reads_empty = True
    capabilities: ClassVar[Capabilities] = _LOADS_SESSIONS

    def credentials(self) -> tuple[bool | None, str | None]:
        env = self.credential_env()
        variables = (
            "GEMINI_API_KEY",
            "GOOGLE_API_KEY",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "GOOGLE_GEMINI_BASE_URL",
        )
        oauth = self.home(env) / ".gemini" / "oauth_creds.json"
        return self.credentials_in(env, variables, (oauth,)) or (False, None)

    @classmethod
    def prepares(cls, resume: str | None) -> bool:
        return resume is not None  # prepare() moves a resumed session's file; a new one needs nothing

    def prepare(self, spec: ProcessSpec, task: Task) -> list[str]:
        # gemini-cli 0.61.0 names a session's file after the minute it (re)opens it: loading a session
        # in the minute it was written recreates that very file and clobbers the conversation
        # (protocols/acp-gemini-qwen.md §7).  Moving the file to an earlier minute's name keeps it
        # findable (sessions are found by the id inside) and out of the way.
        if not task.resume:
            return []
        from datetime import datetime, timedelta
        from pathlib import Path

        now = datetime.now().strftime("%Y-%m-%dT%H-%M")
        home = Path(spec.env.get("HOME", str(Path.home())))
        done = []
        for path in (home / ".gemini" / "tmp").glob(f"*/chats/session-{now}-{task.resume[:8]}.json*"):
            earlier = (datetime.now() - timedelta(minutes=1)).strftime("%Y-%m-%dT%H-%M")
            target = path.with_name(path.name.replace(now, earlier, 1))
            if not target.exists():
                path.rename(target)
                done.append(f"moved session file {path.name} to {target.name} so the load cannot clobber it")
        return done

    def capture_normalizer(self, first_line: bytes) -> Normalizer:
        if is_jsonrpc(first_line):
            return self.create_normalizer()
        from ..normalizers.gemini_stream_json import GeminiStreamJsonNormalizer

        return GeminiStreamJsonNormalizer()  # a capture of headless `gemini -p -o stream-json`

    def auth_method(self, methods: list[dict[str, Any]], env: dict[str, str]) -> str | None:
        ids = {str(m.get("id")) for m in methods}
        if env.get("GEMINI_API_KEY") and "gemini-api-key" in ids:
            return "gemini-api-key"
        if env.get("GOOGLE_GENAI_USE_VERTEXAI") and "vertex-ai" in ids:
            return "vertex-ai"
        return None


class QwenExecutor(AcpExecutor):
    name = "qwen"
    program = "qwen"
    npm_package = "@qwen-code/qwen-code"
    install_hint = "Install it with: npm install @qwen-code/qwen-code"
    acp_flags = ("--acp",)
    model_flag = "--model"
    capabilities: ClassVar[Capabilities] = _LOADS_SESSIONS

    def credentials(self) -> tuple[bool | None, str | None]:
        env = self.credential_env()
        home = self.home(env) / ".qwen"
        found = self.credentials_in(
            env, ("OPENAI_API_KEY", "DASHSCOPE_API_KEY", "QWEN_API_KEY"), (home / "oauth_creds.json",)
        )
        if found:
            return found
        import json

        try:
            settings = json.loads((home / "settings.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False, None
        auth = (settings.get("security") or {}).get("auth") or {}
        if isinstance(auth, dict) and auth.get("apiKey"):
            return True, str(home / "settings.json")
        return False, None

    def auth_method(self, methods: list[dict[str, Any]], env: dict[str, str]) -> str | None:
        ids = {str(m.get("id")) for m in methods}
        return "openai" if env.get("OPENAI_API_KEY") and "openai" in ids else None
