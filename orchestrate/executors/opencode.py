"""OpenCode (`opencode acp`, npm ``opencode-ai``): an ACP agent.  Its other machine format,
``opencode run --format json``, is replayed by :mod:`..normalizers.opencode_jsonl`."""

from __future__ import annotations

from .acp import LOADS_AND_RESUMES, AcpExecutor, is_jsonrpc
from .base import Capabilities

# Loaded before `orchestrate run` spawns its agent (cli/early.py builds the command line with
# process_spec): json (its decoder brings re) and pathlib are imported where they are used, typing
# not at all (~3 ms; mypy takes any TYPE_CHECKING as true).  tests/test_early_executors.py holds it so.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import ClassVar

    from ..normalizers.base import Normalizer
    from ..task import Task

__all__ = ["OpenCodeExecutor"]

# OpenCode reads a whole config from this variable on top of the user's files: it is how the run
# turns its permission prompts on without touching the user's opencode.json.
CONFIG_CONTENT_VARIABLE = "OPENCODE_CONFIG_CONTENT"
# Out of the box OpenCode runs shell commands and edits without asking (protocols/more-agents.md §1);
# an orchestrated run routes them through the approval pipeline instead.
ASK_PERMISSIONS = {"permission": {"bash": "ask", "edit": "ask", "webfetch": "ask"}}
ASK_PERMISSIONS_JSON = '{"permission": {"bash": "ask", "edit": "ask", "webfetch": "ask"}}'
"""``json.dumps(ASK_PERMISSIONS)``, written out: the early start builds the environment without json
(tests/test_early_executors.py holds the two equal)."""
_PROVIDER_KEYS = (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "OPENROUTER_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_GENERATIVE_AI_API_KEY",
    "GROQ_API_KEY",
    "XAI_API_KEY",
)


class OpenCodeExecutor(AcpExecutor):
    name = "opencode"
    program = "opencode"
    npm_package = "opencode-ai"
    install_hint = "Install it with: npm install opencode-ai"
    acp_flags = ("acp",)
    capabilities: ClassVar[Capabilities] = LOADS_AND_RESUMES

    def env_additions(self, task: Task) -> dict[str, str]:
        # `opencode run` takes its project from $PWD, not from its working directory: an inherited
        # PWD would put its tools in our directory (protocols/more-agents.md §1, gotchas).
        return {
            "PWD": str(task.cwd),
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            CONFIG_CONTENT_VARIABLE: ASK_PERMISSIONS_JSON,
        }

    def credentials(self) -> tuple[bool | None, str | None]:
        import json

        env = self.credential_env()
        data = env.get("XDG_DATA_HOME") or str(self.home(env) / ".local" / "share")
        config = env.get("XDG_CONFIG_HOME") or str(self.home(env) / ".config")
        found = self.credentials_in(env, _PROVIDER_KEYS, (_path(data, "opencode", "auth.json"),))
        if found:
            return found
        # A provider of one's own (an OpenAI-compatible server, say) configured with its key.
        for name in ("opencode.json", "opencode.jsonc", "config.json"):
            path = _path(config, "opencode", name)
            try:
                settings = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(settings, dict) and settings.get("provider"):
                return True, str(path)
        return False, None

    def capture_normalizer(self, first_line: bytes) -> Normalizer:
        if is_jsonrpc(first_line):
            return self.create_normalizer()
        from ..normalizers.opencode_jsonl import OpenCodeRunNormalizer

        return OpenCodeRunNormalizer()


def _path(root: str, *parts: str) -> Path:
    from pathlib import Path

    return Path(root).joinpath(*parts)
