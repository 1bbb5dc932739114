"""The options every executor understands (a pydantic model: public, validated)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ExecutorOptions"]


def _no_arguments() -> list[str]:
    """A new empty list: ``list`` itself, as a function of Python's own.  pydantic reads a default
    factory's signature, and a builtin's is parsed from its text by the tokenizer, whose patterns
    are compiled on first use: ~2.5 ms of CPU on every start of ``orchestrate run``."""
    return []


class ExecutorOptions(BaseModel):
    """Options every executor understands; unset ones keep the CLI's defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    permission_mode: str | None = None
    base_command: str | list[str] | None = Field(
        default=None, description="the CLI to run: a path, or e.g. 'npx -y @anthropic-ai/claude-code@2.1.330'"
    )
    extra_args: list[str] = Field(default_factory=_no_arguments)
    env: dict[str, str] = Field(default_factory=dict, description="added to the caller's environment")
    sandbox: str | None = Field(
        default=None, description="Codex: read-only, workspace-write, danger-full-access"
    )
    approval_policy: str | None = Field(default=None, description="Codex: untrusted, on-request, never")
    config: dict[str, Any] = Field(
        default_factory=dict, description="CLI configuration overrides (Codex: -c k=v)"
    )
    mcp_servers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="MCP servers by name: {command, args, env} (or {url})"
    )
    stable_seconds: float | None = Field(
        default=None, gt=0, description="Terminal agents: how long the screen is still before a turn is over"
    )
