"""Executor configuration given as text: ``K=V`` overrides and MCP server files."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from ..errors import ConfigError

__all__ = ["load_mcp_servers", "parse_config_overrides"]


def parse_config_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """``['effort="high"', "a.b=1"]`` -> ``{"effort": "high", "a": {"b": 1}}``.  A value is read as
    TOML; one that is not valid TOML is kept as a plain string (as Codex does)."""
    out: dict[str, Any] = {}
    if not pairs:
        return out
    import tomllib  # only with -c: every run builds its options here, while its agent starts

    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--config expects KEY=VALUE, got {pair!r}")
        try:
            value: Any = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text
        node = out
        *parents, last = key.strip().split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--config {key}: {part} is already set to a value")
            node = child
        node[last] = value
    return out


def load_mcp_servers(path: Path) -> dict[str, dict[str, Any]]:
    """MCP servers from a JSON file: ``{"name": {"command": ..., "args": [...], "env": {...}}}``, or the
    same under an ``"mcpServers"`` key (the format Claude Desktop and others use)."""
    try:
        raw = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read MCP servers from {path}: {exc}") from exc
    servers = raw.get("mcpServers", raw) if isinstance(raw, dict) else None
    if not isinstance(servers, dict) or not all(isinstance(v, dict) for v in servers.values()):
        raise ConfigError(f"{path}: expected an object of MCP servers, each an object")
    return servers
