"""Cursor's agent over ACP (`cursor-agent acp`): live approvals, unlike its ``-p`` mode (cursor.py).
The CLI is not on npm, so the tests drive a fake that follows Cursor's documented ACP behaviour
(fixtures/bin/fake_cursor_acp.py)."""

from __future__ import annotations

from .acp import LOADS_AND_RESUMES, AcpExecutor
from .base import Capabilities
from .cursor import CursorExecutor

# Loaded before `orchestrate run` spawns its agent (cli/early.py builds the command line with
# process_spec): types only here (mypy takes any TYPE_CHECKING as true).
# tests/test_early_executors.py holds it so.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar

__all__ = ["CursorAcpExecutor"]


class CursorAcpExecutor(AcpExecutor):
    """Cursor advertises one auth method, ``cursor_login``, and wants it called before a session
    opens; it succeeds when the CLI is signed in already (``cursor-agent login``) or has
    ``CURSOR_API_KEY`` / ``CURSOR_AUTH_TOKEN``.  The model and mode are session config options."""

    name = "cursor-acp"
    program = "cursor-agent"
    install_hint = CursorExecutor.install_hint
    acp_flags = ("acp",)
    authenticate_first = True  # initialize, authenticate, then session/new (cursor.com/docs/cli/acp)
    capabilities: ClassVar[Capabilities] = LOADS_AND_RESUMES

    def base_command(self) -> list[str]:
        # The same program as the -p executor, found the same way (`cursor-agent`, or Cursor's `agent`).
        return CursorExecutor(self.options).base_command()

    def credentials(self) -> tuple[bool | None, str | None]:
        found = CursorExecutor(self.options).credentials()
        if found[0]:
            return found
        return self.credentials_in(self.credential_env(), ("CURSOR_AUTH_TOKEN",)) or found

    def auth_method(self, methods: list[dict[str, Any]], env: dict[str, str]) -> str | None:
        return "cursor_login" if any(m.get("id") == "cursor_login" for m in methods) else None
