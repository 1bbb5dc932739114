"""OpenAI Codex (`@openai/codex`): the app-server over JSON-RPC, and `codex exec --json`."""

from __future__ import annotations

import os

from .base import Capabilities, Executor

# Loaded before `orchestrate run` spawns its agent (cli/early.py builds the command line with
# process_spec): what only the run, a replay or `orchestrate check` needs (the normalizers and
# their entry model, the approval request, orjson ~30 ms, the redactor with re2, tomllib, shlex,
# pathlib) is imported where it is used, and typing not at all (~3 ms; mypy takes any
# TYPE_CHECKING as true).  tests/test_early_executors.py holds it so.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any, ClassVar

    from ..approvals.base import ApprovalRequest
    from ..normalizers.base import Normalizer
    from ..normalizers.codex_app_server import CodexAppServerNormalizer
    from ..normalizers.codex_exec_jsonl import CodexExecNormalizer
    from ..task import Task

__all__ = ["CodexExecExecutor", "CodexExecutor", "config_overrides", "forward_mcp_secrets"]

DEFAULT_SANDBOX = "workspace-write"
DEFAULT_APPROVAL_POLICY = "untrusted"
_KEY_VARIABLES = ("OPENAI_API_KEY", "CODEX_API_KEY")


def config_overrides(config: dict[str, Any], mcp_servers: dict[str, dict[str, Any]]) -> list[str]:
    """``-c key=value`` arguments, nested tables flattened to dotted keys, values as TOML (JSON
    scalars and arrays are valid TOML)."""
    flat: list[tuple[str, Any]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        else:
            flat.append((prefix, value))

    walk("", config)
    if mcp_servers:
        walk("mcp_servers", mcp_servers)
    if not flat:  # the usual case, and the only one the early start sees: no -c, no MCP server
        return []
    import orjson

    return [arg for key, value in flat for arg in ("-c", f"{key}={orjson.dumps(value).decode()}")]


def forward_mcp_secrets(
    mcp_servers: dict[str, dict[str, Any]], environment: Mapping[str, str]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """MCP servers with their secret-looking ``env`` values taken off the command line (where any
    user can read them in ``ps``): each becomes a variable of Codex's own environment that Codex
    forwards to the server by name (``env_vars``, Codex >= 0.169).  A name that ``environment`` (or
    another server) already sets to another value stays in ``env``.  Returns the servers and the
    variables to add."""
    if not mcp_servers:
        return {}, {}
    from ..process.redact import is_secret_name  # (re2 and orjson: not for a run without MCP)

    servers: dict[str, dict[str, Any]] = {}
    moved: dict[str, str] = {}
    for name, spec in mcp_servers.items():
        env = spec.get("env")
        if not isinstance(env, dict):
            servers[name] = spec
            continue
        kept: dict[str, Any] = {}
        forwarded: list[str] = []
        for key, value in env.items():
            free = environment.get(key, value) == value and moved.get(key, value) == value
            if isinstance(value, str) and is_secret_name(key) and free:
                moved[key] = value
                forwarded.append(key)
            else:
                kept[key] = value
        out = {k: v for k, v in spec.items() if k != "env"}
        if kept:
            out["env"] = kept
        if forwarded:
            out["env_vars"] = [*(spec.get("env_vars") or []), *forwarded]
        servers[name] = out
    return servers, moved


class _CodexBase(Executor):
    program = "codex"
    npm_package = "@openai/codex"
    install_hint = "Install it with: npm install @openai/codex"

    def codex_home(self, task: Task | None = None) -> Path:
        from pathlib import Path

        env = {**os.environ, **self.options.env, **(task.env if task else {})}
        return (
            Path(env["CODEX_HOME"])
            if env.get("CODEX_HOME")
            else Path(env.get("HOME", "~")).expanduser() / ".codex"
        )

    def credentials(self) -> tuple[bool | None, str | None]:
        env = self.credential_env()
        home = self.codex_home()
        found = self.credentials_in(env, _KEY_VARIABLES, (home / "auth.json",))
        if found:
            return found
        import tomllib

        try:
            config = tomllib.loads((home / "config.toml").read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            return False, None
        provider = config.get("model_providers", {}).get(config.get("model_provider", ""), {})
        key = provider.get("env_key") if isinstance(provider, dict) else None
        if isinstance(provider, dict) and provider and (not key or env.get(key)):
            return True, f"model provider {config.get('model_provider')!r} in {home / 'config.toml'}"
        return False, None

    @staticmethod
    def parse_version(first_line: str) -> str:
        return first_line.split()[-1]  # "codex-cli 0.169.0"

    def sandbox(self) -> str:
        return self.options.sandbox or DEFAULT_SANDBOX

    def overrides(self, task: Task) -> list[str]:
        return config_overrides(self.options.config, self._mcp(task)[0])

    def env_additions(self, task: Task) -> dict[str, str]:
        return self._mcp(task)[1]

    def _mcp(self, task: Task) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        return forward_mcp_secrets(self.options.mcp_servers, {**os.environ, **self.options.env, **task.env})


class CodexExecutor(_CodexBase):
    """``codex app-server``: threads and turns over JSON-RPC, live approvals, interrupt, resume, fork."""

    name = "codex"
    protocol = "jsonrpc"
    capabilities: ClassVar[Capabilities] = Capabilities(
        protocol="jsonrpc",
        session_resume=True,
        fork=True,
        approvals=True,
        mcp=True,
        mid_execution_messages=True,
        interrupt=True,
        requires_setup=True,
    )

    def build_argv(self, task: Task) -> list[str]:
        return [*self.base_command(), "app-server", *self.overrides(task), *self.options.extra_args]

    def create_normalizer(self) -> CodexAppServerNormalizer:
        from ..normalizers.codex_app_server import CodexAppServerNormalizer

        return CodexAppServerNormalizer()

    def capture_normalizer(self, first_line: bytes) -> Normalizer:
        import orjson

        from ..normalizers.codex_exec_jsonl import CodexExecNormalizer

        # `codex exec --json` captures open with {"type":"thread.started",...}; app-server never
        # sends a "type" at the top level.
        try:
            first = orjson.loads(first_line)
        except orjson.JSONDecodeError:
            first = None
        if isinstance(first, dict) and "." in str(first.get("type", "")):
            return CodexExecNormalizer()
        return self.create_normalizer()

    def thread_request(self, task: Task) -> tuple[str, dict[str, Any]]:
        """The request that opens the conversation: thread/start, thread/resume or thread/fork."""
        params: dict[str, Any] = {
            "cwd": str(task.cwd),
            "sandbox": self.sandbox(),
            "approvalPolicy": self.options.approval_policy or DEFAULT_APPROVAL_POLICY,
        }
        model = task.model or self.options.model
        if model:
            params["model"] = model
        if task.resume:
            return ("thread/fork" if task.fork else "thread/resume"), {"threadId": task.resume, **params}
        return "thread/start", params

    def approval_request(
        self,
        request_id: str,
        method: str,
        params: dict[str, Any],
        item: dict[str, Any],
        task: Task,
        session_id: str | None,
    ) -> ApprovalRequest:
        """A server approval request in the approval service's terms; ``item`` is what the item's
        ``item/started`` said (a file change's paths are only there)."""
        import shlex

        from ..approvals.base import ApprovalRequest
        from ..normalizers.codex_items import display_command

        command = params.get("command") or item.get("command")
        # An argv list is quoted back, so ["bash", "-lc", "rm -rf x"] is not judged as "bash -lc rm".
        joined = None
        if command:
            joined = shlex.join(map(str, command)) if isinstance(command, list) else str(command)
        # Only a bash wrapper is taken off: the script of ["sh", "-c", ...] or ["zsh", "-lc", ...]
        # is judged knowing which shell reads it (dash and zsh read some text otherwise than bash).
        text = display_command(joined) if joined and joined.startswith(("bash ", "/bin/bash ")) else joined
        paths = tuple(
            str(c.get("path")) for c in item.get("changes") or [] if isinstance(c, dict) and c.get("path")
        )
        return ApprovalRequest(
            request_id=request_id,
            tool_name="commandExecution" if text else "fileChange",
            tool_input=params,
            tool_call_id=params.get("itemId"),
            context=params.get("reason"),
            command=text,
            paths=paths,
            read_only=False,
            executor=self.name,
            session_id=session_id,
            cwd=str(task.cwd),
        )


class CodexExecExecutor(_CodexBase):
    """``codex exec --json``: one process per turn, the prompt on stdin, no live approvals (the
    sandbox is chosen up front), resume by thread id."""

    name = "codex-exec"
    protocol = "jsonl"
    driver = "prompt-on-stdin"
    capabilities: ClassVar[Capabilities] = Capabilities(
        protocol="jsonl",
        session_resume=True,
        fork=False,
        approvals=False,
        mcp=True,
        mid_execution_messages=False,
        interrupt=True,
        requires_setup=True,
    )

    def build_argv(self, task: Task) -> list[str]:
        argv = [*self.base_command(), "exec", "--json", "--skip-git-repo-check", "-s", self.sandbox()]
        model = task.model or self.options.model
        if model:
            argv += ["-m", model]
        argv += [*self.overrides(task), *self.options.extra_args]
        # exec-level flags go before `resume`, which takes none of its own (protocols/codex.md §3).
        if task.resume:
            argv += ["resume", task.resume]
        return [*argv, "-"]

    def create_normalizer(self) -> CodexExecNormalizer:
        from ..normalizers.codex_exec_jsonl import CodexExecNormalizer

        return CodexExecNormalizer()
