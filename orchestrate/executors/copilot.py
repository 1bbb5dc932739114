"""GitHub Copilot CLI (`copilot --acp`, npm ``@github/copilot``): an ACP agent.  Its other machine
format, ``copilot -p --output-format json``, is replayed by :mod:`..normalizers.copilot_jsonl`."""

from __future__ import annotations

from .acp import LOADS_AND_RESUMES, AcpExecutor, is_jsonrpc
from .base import Capabilities

# Loaded before `orchestrate run` spawns its agent (cli/early.py builds the command line with
# process_spec): types only here (mypy takes any TYPE_CHECKING as true); its
# normalizers are imported where used.  tests/test_early_executors.py holds it so.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar

    from ..normalizers.base import Normalizer
    from ..task import Task

__all__ = ["CopilotExecutor"]

_TOKENS = ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "COPILOT_PROVIDER_BASE_URL")


class CopilotExecutor(AcpExecutor):
    name = "copilot"
    program = "copilot"
    npm_package = "@github/copilot"
    install_hint = "Install it with: npm install @github/copilot"
    acp_flags = ("--acp",)
    # Copilot has no model option in its session config (protocols/more-agents.md §2): the flag.
    model_flag = "--model"
    capabilities: ClassVar[Capabilities] = LOADS_AND_RESUMES

    def env_additions(self, task: Task) -> dict[str, str]:
        return {"COPILOT_AUTO_UPDATE": "false"}

    @staticmethod
    def parse_version(first_line: str) -> str:
        # "GitHub Copilot CLI 1.0.102."
        words = [w.rstrip(".") for w in first_line.split()]
        return next((w for w in words if w[:1].isdigit()), first_line)

    def credentials(self) -> tuple[bool | None, str | None]:
        # A GitHub token, a bring-your-own-key provider, or a `copilot login` in its config dir.
        env = self.credential_env()
        home = self.home(env) / ".copilot"
        found = self.credentials_in(env, _TOKENS, (home / "config.json",))
        return found or (False, None)

    def capture_normalizer(self, first_line: bytes) -> Normalizer:
        if is_jsonrpc(first_line):
            return self.create_normalizer()
        from ..normalizers.copilot_jsonl import CopilotNormalizer

        return CopilotNormalizer()
