"""A rule policy read from a TOML file, after ch4p's security policy.

    autonomy = "supervised"          # readonly | supervised | full
    fallback = "deny"                # supervised, no rule matched: "deny" or "ask" (the terminal)
    [allow]
    tools = ["Read", "Grep"]         # tool names (glob patterns)
    commands = ["git status*", "ls*"]
    paths = ["src/**"]               # relative to the run's working directory, or absolute
    [deny]
    tools = ["WebFetch"]
    commands = ["rm -rf*", "sudo *"]
    paths = ["**/.env", "/etc/**"]

Order: a deny rule always wins; ``readonly`` approves read-only tools only; ``full`` approves
everything not denied; ``supervised`` approves what an allow rule matches (a call whose command
and paths all match) and hands the rest to the fallback.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from ..errors import ConfigError
from .base import ApprovalDecision, ApprovalRequest, ApprovalService

__all__ = ["RulePolicy", "Rules"]

Autonomy = Literal["readonly", "supervised", "full"]


@dataclass(frozen=True)
class Rules:
    tools: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Any, where: str) -> Rules:
        if raw is None:
            return cls()
        if not isinstance(raw, dict) or set(raw) - {"tools", "commands", "paths"}:
            raise ConfigError(f"[{where}] takes only tools, commands and paths lists")
        lists = {}
        for key in ("tools", "commands", "paths"):
            value = raw.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"[{where}] {key} must be a list of strings")
            lists[key] = tuple(value)
        return cls(**lists)


@dataclass
class RulePolicy:
    autonomy: Autonomy = "supervised"
    allow: Rules = field(default_factory=Rules)
    deny: Rules = field(default_factory=Rules)
    fallback: ApprovalService | None = None  # None: deny what no rule allows

    @classmethod
    def from_file(cls, path: Path, ask: ApprovalService | None = None) -> RulePolicy:
        """Load a policy; ``ask`` is the service used when ``fallback = "ask"``."""
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read policy file {path}: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"policy file {path} is not valid TOML: {exc}") from exc
        return cls.from_dict(raw, ask)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], ask: ApprovalService | None = None) -> RulePolicy:
        unknown = set(raw) - {"autonomy", "fallback", "allow", "deny"}
        if unknown:
            raise ConfigError(f"unknown policy keys: {', '.join(sorted(unknown))}")
        autonomy = raw.get("autonomy", "supervised")
        if autonomy not in ("readonly", "supervised", "full"):
            raise ConfigError(f"autonomy must be readonly, supervised or full, not {autonomy!r}")
        fallback = raw.get("fallback", "deny")
        if fallback not in ("deny", "ask"):
            raise ConfigError(f"fallback must be deny or ask, not {fallback!r}")
        if fallback == "ask" and ask is None:
            raise ConfigError('fallback = "ask" needs an interactive approval service')
        return cls(
            autonomy=autonomy,
            allow=Rules.parse(raw.get("allow"), "allow"),
            deny=Rules.parse(raw.get("deny"), "deny"),
            fallback=ask if fallback == "ask" else None,
        )

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        denied = self._matching_deny(request)
        if denied:
            return ApprovalDecision.deny(f"denied by policy rule {denied!r}")
        if self.autonomy == "full":
            return ApprovalDecision.approve()
        if self.autonomy == "readonly":
            if request.read_only:
                return ApprovalDecision.approve()
            return ApprovalDecision.deny(f"policy is read-only: {request.tool_name} may change things")
        if self._allowed(request):
            return ApprovalDecision.approve()
        if self.fallback is not None:
            return await self.fallback.request_approval(request)
        return ApprovalDecision.deny(f"no policy rule allows {request.tool_name}")

    def refuse_write(self, path: str, cwd: str | None) -> str | None:
        """A file write the agent asks the client to do: deny rules, then read-only autonomy."""
        for pattern in self.deny.paths:
            if _path_matches(path, pattern, cwd):
                return f"denied by policy rule {pattern!r}"
        if self.autonomy == "readonly":
            return "policy is read-only: no file may be written"
        return None

    def _matching_deny(self, request: ApprovalRequest) -> str | None:
        for pattern in self.deny.tools:
            if fnmatchcase(request.tool_name, pattern):
                return pattern
        if request.command is not None:
            for pattern in self.deny.commands:
                if fnmatchcase(request.command.strip(), pattern):
                    return pattern
        for path in request.paths:
            for pattern in self.deny.paths:
                if _path_matches(path, pattern, request.cwd):
                    return pattern
        return None

    def _allowed(self, request: ApprovalRequest) -> bool:
        if any(fnmatchcase(request.tool_name, p) for p in self.allow.tools):
            return True
        if request.command is not None:
            if not any(fnmatchcase(request.command.strip(), p) for p in self.allow.commands):
                return False
            return all(any(_path_matches(x, p, request.cwd) for p in self.allow.paths) for x in request.paths)
        return bool(request.paths) and all(
            any(_path_matches(x, p, request.cwd) for p in self.allow.paths) for x in request.paths
        )


def _path_matches(path: str, pattern: str, cwd: str | None) -> bool:
    """Match the absolute path, and the path relative to the working directory, against ``pattern``.
    ``..`` is resolved lexically first, so ``src/../.env`` cannot slip past a ``**/.env`` rule."""
    p = PurePosixPath(path)
    if not p.is_absolute() and cwd:
        p = PurePosixPath(cwd) / p
    absolute = _normalize(p)
    candidates = [absolute]
    if cwd:
        base = _normalize(PurePosixPath(cwd))
        if absolute == base or absolute.startswith(base.rstrip("/") + "/"):
            candidates.append(absolute[len(base.rstrip("/")) + 1 :] or ".")
    # "**/x" should also match "x" at the top.
    patterns = [pattern, pattern[3:]] if pattern.startswith("**/") else [pattern]
    return any(fnmatchcase(c, pat) for c in candidates for pat in patterns)


def _normalize(p: PurePosixPath) -> str:
    parts: list[str] = []
    for part in p.parts:
        if part == "..":
            if len(parts) > 1:
                parts.pop()
        elif part != ".":
            parts.append(part)
    return str(PurePosixPath(*parts)) if parts else "/"
