"""Why a run failed, in one line a person can act on: the model unreachable, rate limited, the
credentials refused, or the CLI not installed (with the command that installs it).

Recognised from what the agents actually say (tried against the scripted model server answering
401 and 429, and against a dead port; see tests/test_failure.py):

- Claude Code: an ``api_error`` entry "API Error: Connection refused ... (ECONNREFUSED)", "Failed to
  authenticate. API Error: 401 ..." (code ``auth_required``), "API Error: Request rejected (429)";
  its ``api_retry`` notices carry ``error_status`` and ``error`` ("rate_limit", "authentication_failed").
- Codex: "unexpected status 401 Unauthorized: ...", "exceeded retry limit, last status: 429 Too Many
  Requests" (``codex_error.*.httpStatusCode``); a dead server is "Reconnecting... waiting for network"
  retries with details "Connection failed: error sending request" until the run's time limit.
- Gemini CLI (ACP): "session/prompt failed: {"error":{"code":401,...,"status":"UNAUTHENTICATED"}}"
  (the JSON-RPC error code is the HTTP status); a 429 is retried out of sight, and only its stderr
  says ``status: 429``.
- Qwen Code (ACP): "session/prompt failed: 401 ..." (``data.details``).

The whole run is looked at, not only its last error: an agent stopped by our time limit while it
retried a dead server ends with "the run exceeded its time limit", and the reason is the retries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

from ..entries import ErrorEntry
from ..executors.base import Executor
from ..run import RunResult

__all__ = ["Failure", "classify", "install_command", "missing_cli"]

Kind = Literal["model_unreachable", "rate_limited", "auth_required", "cli_missing"]

_MAX_DETAIL = 200

_PRIORITY: tuple[Kind, ...] = ("auth_required", "rate_limited", "model_unreachable")
_LABEL: dict[Kind, str] = {
    "model_unreachable": "model unreachable",
    "rate_limited": "rate limited",
    "auth_required": "authentication required",
    "cli_missing": "CLI missing",
}
_ADVICE: dict[Kind, str] = {
    "model_unreachable": "check the network, or the base URL the agent is given",
    "rate_limited": "wait and run again, or use another key or model",
    "auth_required": "set the agent's API key, or log in with its own CLI",
    "cli_missing": "",
}

# Words the agents use, on their own (not an HTTP status); looked for case-insensitively.
_WORDS: tuple[tuple[Kind, re.Pattern[str]], ...] = (
    (
        "auth_required",
        re.compile(
            r"unauthenticated|unauthori[sz]ed|authentication[_ ]failed|failed to authenticate|"
            r"not logged in|invalid[_ ]api[_ ]key|invalid x-api-key|please run /login|api key not valid",
            re.I,
        ),
    ),
    (
        "rate_limited",
        re.compile(r"rate[_ ]limit|too many requests|resource_exhausted|quota exceeded", re.I),
    ),
    (
        "model_unreachable",
        re.compile(
            r"econnrefused|connection refused|connection failed|error sending request|enotfound|"
            r"getaddrinfo|fetch failed|econnreset|etimedout|waiting for network|unable to connect|"
            r"network is unreachable|could not resolve host",
            re.I,
        ),
    ),
)
_STATUS_KIND: dict[int, Kind] = {401: "auth_required", 403: "auth_required", 429: "rate_limited"}
# An HTTP status named in text: "status: 429", "(429)", "API Error: 401", "failed: 401 ...", never a
# bare number (a line number in a stack trace).
_STATUS_TEXT = re.compile(r"(?:status\W{0,3}|\(|error\W{0,3}|failed\W{0,3}|code\W{0,3})(401|403|429)\b", re.I)
# Errors that follow from the reason rather than being it: the search goes on past them.
_CONSEQUENCES = frozenset({"api_retry", "timeout", "startup_timeout", "interrupted", "process_exited"})


_STATUS_KEYS = frozenset({"status", "error_status", "httpStatusCode", "code", "status_code"})


@dataclass(frozen=True)
class Failure:
    kind: Kind
    detail: str  # what the agent said, one line

    @property
    def line(self) -> str:
        """``rate limited: API Error: Request rejected (429) · slow down — wait and run again, ...``"""
        advice = f" — {_ADVICE[self.kind]}" if _ADVICE[self.kind] else ""
        return f"{_LABEL[self.kind]}: {self.detail}{advice}"


def classify(result: RunResult) -> Failure | None:
    """Why ``result`` failed, when it is one of the reasons above; None for a success or another
    failure (the last error then speaks for itself)."""
    if result.outcome == "success":
        return None
    errors = [e for e in result.entries if isinstance(e.type, ErrorEntry)]
    # Latest first: the error that ended the run, then the retries before it, then stderr.  An error
    # of another kind stops the search: that one is the reason, and it speaks for itself.
    for entry in reversed(errors):
        assert isinstance(entry.type, ErrorEntry)
        error = entry.type.error
        extra = entry.metadata.extra if entry.metadata and entry.metadata.extra else {}
        kind = _kind(error.code, _statuses(extra), [error.message, *_strings(extra)])
        if kind is not None:
            return Failure(kind, _one_line(_detail(error.message, extra)))
        if error.code not in _CONSEQUENCES:
            return None
    tail = result.stderr_tail or ""
    kind = _kind(None, set(), [tail])
    if kind is not None:
        return Failure(kind, _one_line(_matching_line(tail, kind)))
    return None


def _kind(code: str | None, statuses: set[int], texts: list[str]) -> Kind | None:
    if code == "auth_required":
        return "auth_required"
    found = {_STATUS_KIND[s] for s in statuses if s in _STATUS_KIND}
    for text in texts:
        found |= {_STATUS_KIND[int(m)] for m in _STATUS_TEXT.findall(text)}
        found |= {kind for kind, words in _WORDS if words.search(text)}
    for kind in _PRIORITY:
        if kind in found:
            return kind
    return None


def _statuses(extra: dict[str, Any]) -> set[int]:
    """HTTP statuses in an error entry's metadata: ``status`` (Claude), ``raw.error_status`` (Claude's
    retries), ``codex_error.<kind>.httpStatusCode`` (Codex), ``rpc_error.code`` (Gemini's is the HTTP
    status)."""
    found: set[int] = set()

    def walk(value: Any, key: str = "") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k)
        elif isinstance(value, int) and not isinstance(value, bool) and key in _STATUS_KEYS:
            found.add(value)

    walk(extra)
    return found


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string in an entry's metadata (bounded in depth): the agents put their words there."""
    if depth > 6:
        return
    if isinstance(value, str):
        yield value[:2000]
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v, depth + 1)
    elif isinstance(value, list):
        for v in value[:20]:
            yield from _strings(v, depth + 1)


def _detail(message: str, extra: dict[str, Any]) -> str:
    """The agent's words: its message, with the retry's own details when it has them (Codex's
    "Reconnecting..." says less than "Connection failed: error sending request")."""
    details = extra.get("details")
    if isinstance(details, str) and details and details not in message:
        return f"{message} ({details})"
    return message


def _matching_line(text: str, kind: Kind) -> str:
    for line in reversed(text.splitlines()):
        if _kind(None, set(), [line]) == kind:
            return line.strip()
    return text.strip().splitlines()[-1] if text.strip() else ""


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_DETAIL else line[: _MAX_DETAIL - 1] + "…"


# --- a CLI that is not installed ------------------------------------------------------------------


def _pins() -> dict[str, str]:
    """The versions the project tests with (clis/package.json of a source checkout); {} when this
    is an installed package without it."""
    for path in (Path(str(files("orchestrate"))).parent / "clis" / "package.json",):
        try:
            deps = json.loads(path.read_text()).get("dependencies")
        except (OSError, ValueError):
            continue
        if isinstance(deps, dict):
            return {k: v for k, v in deps.items() if isinstance(k, str) and isinstance(v, str)}
    return {}


def install_command(executor: type[Executor]) -> str | None:
    """``npm install -g @anthropic-ai/claude-code@2.1.330`` for an executor whose CLI is on npm (the
    version the project is tested with, when known); None otherwise."""
    package = executor.npm_package
    if not package:
        return None
    version = _pins().get(package)
    return f"npm install -g {package}@{version}" if version else f"npm install -g {package}"


def missing_cli(executor: type[Executor], reason: str) -> str:
    """The one line for an executor whose CLI was not found."""
    command = install_command(executor)
    program = f"`{executor.program}` " if executor.program else ""
    if command is not None:
        needs = f"{executor.name} needs {program}and it is not installed"
        return f"{_LABEL['cli_missing']}: {needs}. Install it: {command}"
    return f"{_LABEL['cli_missing']}: {executor.name}: {reason}"
