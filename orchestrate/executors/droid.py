"""Factory Droid (`droid exec -o acp`, npm ``@factory/cli``): an ACP agent.  Its other machine
format, ``droid exec -o stream-json``, is replayed by :mod:`..normalizers.droid_jsonl`."""

from __future__ import annotations

from .acp import LOADS_AND_RESUMES, AcpExecutor, is_jsonrpc
from .base import Capabilities

# Loaded before `orchestrate run` spawns its agent (cli/early.py builds the command line with
# process_spec): json is imported where it is used, typing not at all (~3 ms; mypy
# takes any TYPE_CHECKING as true).  tests/test_early_executors.py holds it so.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar

    from ..normalizers.base import Normalizer

__all__ = ["DroidExecutor"]


class DroidExecutor(AcpExecutor):
    """``-m`` is ignored in ACP mode: the model is chosen after ``session/new`` through the
    session's ``model`` config option (a custom model is ``custom:<displayName>-<index>``), which the
    run does for every agent without a model flag (protocols/more-agents.md §4)."""

    name = "droid"
    program = "droid"
    npm_package = "@factory/cli"
    install_hint = "Install it with: npm install @factory/cli (and its @factory/cli-<platform> package)"
    acp_flags = ("exec", "-o", "acp")
    capabilities: ClassVar[Capabilities] = LOADS_AND_RESUMES

    def credentials(self) -> tuple[bool | None, str | None]:
        # ACP mode refuses a session without FACTORY_API_KEY, even for a custom model of one's own.
        import json

        env = self.credential_env()
        found = self.credentials_in(env, ("FACTORY_API_KEY",))
        if found:
            return found
        settings = self.home(env) / ".factory" / "settings.json"
        try:
            custom = json.loads(settings.read_text(encoding="utf-8")).get("customModels")
        except (OSError, ValueError, AttributeError):
            custom = None
        if custom:
            return False, f"{settings} has custom models, but ACP mode also needs $FACTORY_API_KEY"
        return False, None

    def capture_normalizer(self, first_line: bytes) -> Normalizer:
        if is_jsonrpc(first_line):
            return self.create_normalizer()
        from ..normalizers.droid_jsonl import DroidNormalizer

        return DroidNormalizer()
