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

Deny rules are hard: they are looked at first and nothing overrides them.  Then ``readonly``
approves the tools of our read-only table only; ``full`` approves everything else; ``supervised``
approves what allow rules match (a tool by name; or a command line whose every simple command an
allow rule names and whose paths all match allow paths) and hands the rest to the fallback.
Command rules judge parsed commands (:mod:`.commands`, :mod:`.shell`); path rules judge normalized
and resolved paths (:mod:`.paths`).  A line that cannot be read for certain is never approved by
a rule; when deny rules might match it, it is not approved by ``full`` either: the fallback decides.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError
from .base import ApprovalDecision, ApprovalRequest, ApprovalService
from .commands import CommandPattern
from .facts import Facts
from .paths import PathForms, path_matches

__all__ = ["DenyVerdict", "RulePolicy", "Rules"]

Autonomy = Literal["readonly", "supervised", "full"]


@dataclass(frozen=True)
class Rules:
    tools: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    patterns: tuple[CommandPattern, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = tuple(CommandPattern.parse(c, "rules") for c in self.commands)
        object.__setattr__(self, "patterns", compiled)

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
        for command in lists["commands"]:
            CommandPattern.parse(command, where)  # the error names the table
        return cls(**lists)

    def tool(self, name: str) -> str | None:
        return next((p for p in self.tools if fnmatchcase(name, p)), None)

    def denied_path(self, path: PathForms, cwd: str | None) -> str | None:
        """The first pattern matching the path as given or as resolved (deny rules)."""
        return next((p for p in self.paths if any(path_matches(f, p, cwd) for f in path.forms)), None)

    def allows_path(self, path: PathForms, cwd: str | None) -> bool:
        """Whether the path as given and as resolved each match a pattern (allow rules)."""
        return all(any(path_matches(f, p, cwd) for p in self.paths) for f in path.forms)


@dataclass(frozen=True)
class DenyVerdict:
    """The hard-deny step: ``denied`` (a reason) if a deny rule forbids the call; ``uncertain`` (a
    reason) if one might and only a person may approve it."""

    denied: str | None = None
    uncertain: str | None = None


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
        """The policy alone (no session memory): deny rules, then rules and autonomy, then the
        fallback.  Runs wrap it in :class:`~.pipeline.ApprovalPipeline`, which adds the memory."""
        facts = Facts.of(request)
        verdict = self.hard_deny(facts)
        if verdict.denied is not None:
            return ApprovalDecision.deny(verdict.denied)
        if verdict.uncertain is None:
            decided = self.by_rules(facts)
            if decided is not None:
                return decided
        return await self.ask_fallback(request, verdict.uncertain)

    async def ask_fallback(self, request: ApprovalRequest, uncertain: str | None) -> ApprovalDecision:
        if self.fallback is not None:
            return await self.fallback.request_approval(request)
        return ApprovalDecision.deny(uncertain or f"no policy rule allows {request.tool_name}")

    # --- the steps --------------------------------------------------------------------------

    def hard_deny(self, facts: Facts) -> DenyVerdict:
        """Deny rules, on the tool, every simple command of the line and every path."""
        request = facts.request
        pattern = self.deny.tool(request.tool_name)
        if pattern is not None:
            return DenyVerdict(denied=f"denied by policy rule {pattern!r}")
        uncertain = None
        line = facts.line
        if line is not None:
            for command in line.commands:
                for rule in self.deny.patterns:
                    match rule.denies(command):
                        case "yes":
                            return DenyVerdict(
                                denied=f"denied by policy rule {rule.text!r}: {_brief(command)}"
                            )
                        case "maybe":
                            uncertain = uncertain or (
                                f"policy rule {rule.text!r} may forbid {_brief(command)}: "
                                "part of it is only known at run time"
                            )
            if line.problems and self.deny.patterns:
                uncertain = uncertain or f"cannot be checked against the deny rules: {line.problems[0]}"
        for path in facts.paths:
            pattern = self.deny.denied_path(path, request.cwd)
            if pattern is not None:
                return DenyVerdict(denied=f"denied by policy rule {pattern!r}: {path.resolved}")
        if facts.unknown_writes and self.deny.paths:
            uncertain = (
                uncertain or f"writes to a file only known at run time: {_brief(facts.unknown_writes[0])}"
            )
        return DenyVerdict(uncertain=uncertain)

    def by_rules(self, facts: Facts) -> ApprovalDecision | None:
        """Autonomy and allow rules, for a call no deny rule forbids: a decision, or None for the
        fallback."""
        if self.autonomy == "full":
            return ApprovalDecision.approve()
        if self.autonomy == "readonly":
            if facts.read_only:
                return ApprovalDecision.approve()
            return ApprovalDecision.deny(f"policy is read-only: {facts.request.tool_name} may change things")
        return ApprovalDecision.approve() if self.allows(facts) else None

    def allows(self, facts: Facts) -> bool:
        line = facts.line
        if self.allow.tool(facts.request.tool_name) is not None:
            return line is None or not line.problems
        if line is not None:
            if not facts.clean_line:
                return False
            if not all(any(p.allows(c) for p in self.allow.patterns) for c in line.runnable):
                return False
            return all(self.allow.allows_path(p, facts.request.cwd) for p in facts.request_paths)
        paths = facts.request_paths
        return bool(paths) and all(self.allow.allows_path(p, facts.request.cwd) for p in paths)

    def refuse_read(self, path: str, cwd: str | None) -> str | None:
        """A file read the agent asks the client to do (ACP ``fs/read_text_file``): deny path rules,
        on the given and the resolved path."""
        pattern = self.deny.denied_path(PathForms.of(path, cwd), cwd)
        return None if pattern is None else f"denied by policy rule {pattern!r}"

    def refuse_write(self, path: str, cwd: str | None) -> str | None:
        """A file write the agent asks the client to do: deny rules (on the given and the resolved
        path), then read-only autonomy."""
        pattern = self.deny.denied_path(PathForms.of(path, cwd), cwd)
        if pattern is not None:
            return f"denied by policy rule {pattern!r}"
        if self.autonomy == "readonly":
            return "policy is read-only: no file may be written"
        return None


def _brief(what: object, limit: int = 200) -> str:
    """A command in a reason the agent and the person read: bounded."""
    text = str(what)
    return text if len(text) <= limit else text[: limit - 1] + "…"
