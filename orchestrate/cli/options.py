"""The executor options `run` and `submit` both take on the command line, built in one place."""

from __future__ import annotations

from pathlib import Path

from ..executors.base import ExecutorOptions
from ..executors.config import load_mcp_servers, parse_config_overrides

__all__ = ["build_executor_options"]


def build_executor_options(
    *,
    model: str | None,
    permission_mode: str | None,
    base_command: str | None,
    sandbox: str | None,
    approval_policy: str | None,
    config_pairs: tuple[str, ...],
    mcp_config: Path | None,
    stable_seconds: float | None,
) -> ExecutorOptions:
    """Raises ConfigError for a bad ``-c`` pair or MCP file, as the options' own checks do."""
    return ExecutorOptions(
        model=model,
        permission_mode=permission_mode,
        base_command=base_command,
        sandbox=sandbox,
        approval_policy=approval_policy,
        config=parse_config_overrides(config_pairs),
        mcp_servers=load_mcp_servers(mcp_config) if mcp_config else {},
        stable_seconds=stable_seconds,
    )
