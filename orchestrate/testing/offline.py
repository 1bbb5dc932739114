"""Run real CLIs offline: a scratch home per run, and each CLI's settings for the scripted server
(the recipes of ../shared/protocols/*.md, in code)."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import orjson

from .model_server import ScriptedModelServer

__all__ = [
    "CODEX_KEY_VARIABLE",
    "SCRATCH_PLACEHOLDER",
    "Scratch",
    "claude_offline_env",
    "claude_tui_offline_env",
    "codex_offline_env",
    "copilot_offline_env",
    "droid_offline_env",
    "gemini_offline_env",
    "opencode_offline_env",
    "qwen_offline_env",
]

CODEX_KEY_VARIABLE = "ORCHESTRATE_SCRIPTED_KEY"
SCRATCH_PLACEHOLDER = "/scratch"
"""Stands for the scratch root in case files and, once scrubbed, in fixtures."""


@dataclass
class Scratch:
    """A throwaway home, temp dir and working directory, all under one root that is removed after."""

    root: Path

    @classmethod
    def create(cls, prefix: str = "orchestrate-") -> Scratch:
        root = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
        for sub in ("home", "tmp", "work"):
            (root / sub).mkdir()
        return cls(root)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def work(self) -> Path:
        return self.root / "work"

    def __enter__(self) -> Scratch:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def claude_offline_env(server: ScriptedModelServer, scratch: Scratch) -> dict[str, str]:
    """Claude Code against the scripted server and nothing else, writing only under the scratch root
    (protocols/claude-code.md §2: HOME holds ~/.claude, TMPDIR its sockets; no other traffic)."""
    return {
        **server.anthropic_env(),
        "HOME": str(scratch.home),
        "TMPDIR": str(scratch.tmp),
        "CLAUDE_CONFIG_DIR": str(scratch.home / ".claude"),
    }


def claude_tui_offline_env(server: ScriptedModelServer, scratch: Scratch) -> dict[str, str]:
    """Claude Code's interactive UI offline: ``claude_offline_env`` plus the answers its first-run
    screens would ask for, pre-seeded in its config (onboarding done, the API key accepted, the
    work folder trusted), so it opens straight on its input line."""
    env = claude_offline_env(server, scratch)
    config = Path(env["CLAUDE_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    key = env["ANTHROPIC_API_KEY"]
    (config / ".claude.json").write_bytes(
        orjson.dumps(
            {
                "hasCompletedOnboarding": True,
                # it remembers a key by its last 20 characters
                "customApiKeyResponses": {"approved": [key[-20:]], "rejected": []},
                "projects": {str(scratch.work): {"hasTrustDialogAccepted": True}},
            }
        )
    )
    return env


def codex_offline_env(
    server: ScriptedModelServer, scratch: Scratch, model: str = "gpt-5.5"
) -> dict[str, str]:
    """Codex against the scripted Responses API: a model provider in $CODEX_HOME/config.toml, one
    retry (a scripted error is retried once, then fails fast), and TMPDIR outside CODEX_HOME's
    parents so Codex creates its helper links instead of warning (protocols/codex.md §2, §6)."""
    home = scratch.home / ".codex"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'model = "{model}"\n'
        'model_provider = "scripted"\n'
        "[model_providers.scripted]\n"
        'name = "Scripted Responses API"\n'
        f'base_url = "{server.url}/v1"\n'
        f'env_key = "{CODEX_KEY_VARIABLE}"\n'
        'wire_api = "responses"\n'
        "request_max_retries = 1\n"
        "stream_max_retries = 1\n"
    )
    return {
        "CODEX_HOME": str(home),
        CODEX_KEY_VARIABLE: "scripted-key",
        "HOME": str(scratch.home),
        "TMPDIR": str(scratch.tmp),
    }


def gemini_offline_env(server: ScriptedModelServer, scratch: Scratch) -> dict[str, str]:
    """Gemini CLI against the scripted Gemini API, nothing else: settings that turn off updates,
    usage statistics, telemetry, folder trust and session clean-up (which deletes loaded sessions),
    and the API key auth method in both ACP and headless mode (protocols/acp-gemini-qwen.md §2, §7)."""
    settings = {
        "general": {
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
            "sessionRetention": {"enabled": False},
        },
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"folderTrust": {"enabled": False}, "auth": {"selectedType": "gemini-api-key"}},
        "ide": {"enabled": False},
    }
    (scratch.home / ".gemini").mkdir(parents=True, exist_ok=True)
    (scratch.home / ".gemini" / "settings.json").write_bytes(orjson.dumps(settings))
    return {
        "HOME": str(scratch.home),
        "TMPDIR": str(scratch.tmp),
        "GEMINI_API_KEY": "scripted-key",
        "GOOGLE_GEMINI_BASE_URL": server.url,
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "TERM": "dumb",
    }


def qwen_offline_env(server: ScriptedModelServer, scratch: Scratch) -> dict[str, str]:
    """Qwen Code against the scripted OpenAI chat API: approval mode ``default`` (its own default asks
    the model to classify each call), todo_write on (the only source of plans), no usage statistics,
    telemetry or memory sub-agents (protocols/acp-gemini-qwen.md §2, §7)."""
    settings = {
        "general": {"enableAutoUpdate": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
        "tools": {"approvalMode": "default", "todoWrite": {"enabled": True}},
        "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
        "ide": {"enabled": False},
    }
    (scratch.home / ".qwen").mkdir(parents=True, exist_ok=True)
    (scratch.home / ".qwen" / "settings.json").write_bytes(orjson.dumps(settings))
    return {
        "HOME": str(scratch.home),
        "TMPDIR": str(scratch.tmp),
        "OPENAI_API_KEY": "scripted-key",
        "OPENAI_BASE_URL": f"{server.url}/v1",
        "OPENAI_MODEL": "scripted-model",
        "TERM": "dumb",
    }


SCRIPTED_MODEL = "scripted-model"
"""The model name the OpenAI-chat agents are configured with (the server answers any name)."""


def _xdg(scratch: Scratch) -> dict[str, str]:
    """HOME and every XDG directory inside the scratch root: an agent's config, sessions (OpenCode
    keeps them in SQLite under XDG_DATA_HOME) and caches stay with the run."""
    dirs = {
        "XDG_CONFIG_HOME": scratch.home / ".config",
        "XDG_DATA_HOME": scratch.home / ".local" / "share",
        "XDG_CACHE_HOME": scratch.home / ".cache",
        "XDG_STATE_HOME": scratch.home / ".local" / "state",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(scratch.home), "TMPDIR": str(scratch.tmp), **{k: str(v) for k, v in dirs.items()}}


def opencode_offline_env(server: ScriptedModelServer, scratch: Scratch) -> dict[str, str]:
    """OpenCode against the scripted OpenAI chat API: a provider of its bundled
    ``@ai-sdk/openai-compatible`` in $XDG_CONFIG_HOME/opencode/opencode.json, shell and edits set to
    ask (by default it runs bash without asking), and no update, model catalogue, share or LSP
    download traffic (protocols/more-agents.md §1)."""
    env = _xdg(scratch)
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"scripted/{SCRIPTED_MODEL}",
        "permission": {"bash": "ask", "edit": "ask"},
        "provider": {
            "scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": f"{server.url}/v1", "apiKey": "scripted-key"},
                "models": {SCRIPTED_MODEL: {"name": "Scripted model", "tool_call": True}},
            }
        },
    }
    target = Path(env["XDG_CONFIG_HOME"]) / "opencode"
    target.mkdir(parents=True, exist_ok=True)
    (target / "opencode.json").write_bytes(orjson.dumps(config))
    return {
        **env,
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "TERM": "dumb",
    }


def copilot_offline_env(server: ScriptedModelServer, scratch: Scratch) -> dict[str, str]:
    """GitHub Copilot CLI with its documented bring-your-own-key provider pointed at the scripted
    OpenAI chat API, and ``COPILOT_OFFLINE`` (no GitHub sign-in, telemetry or update check).  The
    binary unpacks its package into its cache on a first start (a second more each run): that one
    cache is shared by every run, under the temp dir (protocols/more-agents.md §2)."""
    cache = Path(tempfile.gettempdir()) / "orchestrate-copilot-cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    return {
        **_xdg(scratch),
        "COPILOT_CACHE_HOME": str(cache),
        "COPILOT_OFFLINE": "true",
        "COPILOT_PROVIDER_TYPE": "openai",
        "COPILOT_PROVIDER_BASE_URL": f"{server.url}/v1",
        "COPILOT_PROVIDER_API_KEY": "scripted-key",
        "COPILOT_MODEL": SCRIPTED_MODEL,
        "TERM": "dumb",
    }


def droid_offline_env(server: ScriptedModelServer, scratch: Scratch) -> dict[str, str]:
    """Factory Droid with a bring-your-own-key custom model (``custom:Scripted-0``) in
    ~/.factory/settings.json pointed at the scripted OpenAI chat API.  Its ACP mode wants a Factory
    key before it opens a session but never checks it offline (protocols/more-agents.md §4)."""
    settings = {
        "customModels": [
            {
                "model": SCRIPTED_MODEL,
                "displayName": "Scripted",
                "baseUrl": f"{server.url}/v1",
                "apiKey": "scripted-key",
                "provider": "generic-chat-completion-api",
                "maxOutputTokens": 4096,
            }
        ]
    }
    (scratch.home / ".factory").mkdir(parents=True, exist_ok=True)
    (scratch.home / ".factory" / "settings.json").write_bytes(orjson.dumps(settings))
    return {**_xdg(scratch), "FACTORY_API_KEY": "fk-scripted", "TERM": "dumb"}
