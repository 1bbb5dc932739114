"""Why a run failed, in one line a person can act on: the model unreachable, rate limited, or the
credentials refused (the CLI layer adds a CLI that is not installed: cli/failure.py).

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
The run reads it as its entries go by (:class:`FailureWatch`), into its result's ``failure``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ..entries import ErrorEntry, NormalizedEntry

__all__ = ["LABELS", "Failure", "FailureWatch", "Kind"]

Kind = Literal["model_unreachable", "rate_limited", "auth_required", "cli_missing"]

_MAX_DETAIL = 200

_PRIORITY: tuple[Kind, ...] = ("auth_required", "rate_limited", "model_unreachable")
LABELS: dict[Kind, str] = {
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
        return f"{LABELS[self.kind]}: {self.detail}{advice}"


class FailureWatch:
    """Finds the error a failed run's reason is read from, as the entries go by: each error entry
    once, in its last state, in index order (a bounded run hands them on as it lets them go, so no
    list of them is kept).

    The reason is read latest first: the error that ended the run, then the retries before it,
    then stderr; an error of another kind stops the search (that one is the reason, and it speaks
    for itself).  Going forward, that is the last *decisive* error: one of those reasons, or of a
    code that is not a consequence of one.  Only the errors that follow from a reason
    (:data:`_CONSEQUENCES`, which are few) are read for their reason as they pass; the last other
    error is only kept, and read once at the end."""

    __slots__ = ("_decisive", "_read")

    def __init__(self) -> None:
        self._decisive: NormalizedEntry | None = None
        self._read: Failure | None = None  # the decisive error's reason, when it was read already

    def see(self, entry: NormalizedEntry) -> None:
        t = entry.type
        if t.kind != "error":
            return
        assert isinstance(t, ErrorEntry)
        if t.error.code not in _CONSEQUENCES:
            self._decisive, self._read = entry, None
            return
        failure = _reason(entry)
        if failure is not None:
            self._decisive, self._read = entry, failure

    def failure(self, outcome: str, stderr_tail: str) -> Failure | None:
        """Why a run that ended with ``outcome`` failed, when it is one of the reasons above; None
        for a success or another failure (the last error then speaks for itself)."""
        if outcome == "success":
            return None
        if self._decisive is not None:
            return self._read or _reason(self._decisive)
        kind = _kind(None, set(), [stderr_tail])
        if kind is not None:
            return Failure(kind, _one_line(_matching_line(stderr_tail, kind)))
        return None


def _reason(entry: NormalizedEntry) -> Failure | None:
    """The reason error entry ``entry`` names, if any."""
    assert isinstance(entry.type, ErrorEntry)
    error = entry.type.error
    extra = entry.metadata.extra if entry.metadata and entry.metadata.extra else {}
    kind = _kind(error.code, _statuses(extra), [error.message, *_strings(extra)])
    return Failure(kind, _one_line(_detail(error.message, extra))) if kind is not None else None


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
