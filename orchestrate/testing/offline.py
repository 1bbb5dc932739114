"""Run real CLIs offline: a scratch home per run, and each CLI's settings for the scripted server
(the recipes of ../shared/protocols/*.md, in code)."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from .model_server import ScriptedModelServer

__all__ = ["CODEX_KEY_VARIABLE", "Scratch", "claude_offline_env", "codex_offline_env"]

CODEX_KEY_VARIABLE = "ORCHESTRATE_SCRIPTED_KEY"


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


def codex_offline_env(
    server: ScriptedModelServer, scratch: Scratch, model: str = "gpt-5.5"
) -> dict[str, str]:
    """Codex against the scripted Responses API: a model provider in $CODEX_HOME/config.toml, no
    retries (a scripted error should fail fast), and TMPDIR outside CODEX_HOME's parents so Codex
    creates its helper links instead of warning (protocols/codex.md §2, §6)."""
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
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )
    return {
        "CODEX_HOME": str(home),
        CODEX_KEY_VARIABLE: "scripted-key",
        "HOME": str(scratch.home),
        "TMPDIR": str(scratch.tmp),
    }
