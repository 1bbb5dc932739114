"""The child's environment: the caller's, plus the executor's additions, plus overrides."""

from __future__ import annotations

from ..errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:  # types only: this is on the path to the early spawn (cli/early.py)
    from collections.abc import Iterable, Mapping

__all__ = ["NESTING_VARIABLES", "build_env", "parse_env_overrides"]

# Set by a Claude Code session in its own children; a nested `claude` that sees it refuses to start
# or behaves as a sub-agent.  Dropped unless the caller sets it explicitly with --env.
NESTING_VARIABLES = ("CLAUDECODE",)


def build_env(
    base: Mapping[str, str],
    additions: Mapping[str, str] = {},
    overrides: Mapping[str, str] = {},
    remove: Iterable[str] = NESTING_VARIABLES,
) -> dict[str, str]:
    """``base`` minus ``remove``, then ``additions``, then ``overrides`` (which win over everything)."""
    env = {k: v for k, v in base.items() if k not in set(remove)}
    env.update(additions)
    env.update(overrides)
    return env


def parse_env_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """``["K=V", ...]`` -> ``{"K": "V"}``; a pair without ``=`` or with an empty name is an error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--env expects KEY=VALUE, got {pair!r}")
        out[key] = value
    return out
