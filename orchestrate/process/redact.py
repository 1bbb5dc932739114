"""Secrets out of what the raw log writes (the ch4p seed's ``sanitizeOutput``).

Three kinds of secret are replaced by :data:`MARK`:

- the values of the agent's own secret-looking environment variables (names containing ``KEY``,
  ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PASSWD``, ``CREDENTIAL`` or ``PRIVATE``, or starting with
  ``AUTH``), wherever they appear, when at least :data:`MIN_VALUE` characters long: a model that
  runs ``env`` or ``cat ~/.config/...`` prints exactly these;
- known key formats, whoever's they are: Anthropic and OpenAI ``sk-...``, GitHub ``ghp_``/``gho_``/
  ``ghs_``/``ghu_``/``ghr_``/``github_pat_``, GitLab ``glpat-``, AWS ``AKIA``/``ASIA``, Slack ``xox?-``,
  Google ``AIza``, Stripe, npm and Hugging Face tokens, JWTs (``eyJ...``), PEM private keys;
- the value part of ``NAME=value`` and ``"name": "value"`` when the name is secret-looking (``env``
  output, ``.env`` files, JSON settings), of ``Authorization:``/``Bearer`` headers and of
  ``scheme://user:password@`` URLs.

Redaction works on bytes and keeps JSON valid: a secret inside a JSON string becomes ``[REDACTED]``
inside the same string.  Where a plain substitution would break a JSON line (a value that starts
inside an escape sequence), the line is parsed, its strings are redacted one by one and it is
written again.  :class:`StreamRedactor` adds the one thing a single chunk cannot give: a secret cut
across two chunks is still found, because lines are redacted whole (a partial line waits for its
end, up to a bound).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import re2

__all__ = ["MARK", "MIN_VALUE", "Redactor", "StreamRedactor", "is_secret_name", "redaction_enabled"]

MARK = b"[REDACTED]"
MIN_VALUE = 8
"""Shorter values of secret-looking variables are left alone: redacting ``true`` or ``1`` everywhere
would wreck the log and protect nothing."""

# PWD and PASS only as a whole word at the end (MYSQL_PWD, SMTP_PASS; not PWD, OLDPWD, PASSAGE); AUTH as
# a word (NPM_CONFIG__AUTH, BASIC_AUTH, AUTHORIZATION; not GIT_AUTHOR_NAME).
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|COOKIE|_PWD$|(?:^|_)PASS$"
    r"|(?:^|_)AUTH(?:$|_|ORIZATION)",
    re.IGNORECASE,
)
_OFF = ("0", "false", "no", "off")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable of this name is treated as holding a secret."""
    return _SECRET_NAME.search(name) is not None


def redaction_enabled(env: Mapping[str, str]) -> bool:
    """False when ``ORCHESTRATE_REDACT`` is 0, false, no or off (for debugging a log byte for byte)."""
    return env.get("ORCHESTRATE_REDACT", "1").strip().lower() not in _OFF


# Each kind of secret twice: an anchor for RE2's linear-time scan of everything written, and the
# exact pattern, which Python's re tries only where an anchor starts (so an anchor must start where
# its exact pattern does, and find at least what it finds).  A token starts where no token character
# precedes it ("task-..." holds no "sk-..."), or after a JSON escape ("\nsk-...").
_NAME_WORD = rb"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE)"
_JSON_WORD = rb"(?i:api[_-]?key|secret|passw(?:or)?d|token|private[_-]?key|credentials?)"
_VALUE = rb"[ \t]{0,8}[=:][ \t]{0,8}(?:\\?[\"'])?(?P<v1>[^\s\"'\\,;&|<>()`]{6,})"
_SET = rb"[ \t]{0,8}[=:]"  # NAME=, NAME = (a shell or ini file), NAME: (YAML)
_ESCAPED = rb"(?<=\\[nrtbf])"


def _token(prefix: bytes, rest: bytes, before: bytes = rb"A-Za-z0-9_-") -> bytes:
    return rb"(?:(?<![" + before + rb"])|" + _ESCAPED + rb")" + prefix + rest


# (the bytes a match can start with, anchor, exact pattern)
_KINDS: list[tuple[bytes, bytes, bytes]] = [
    # PEM: to its END line, or, cut by the end of a JSON string or of a line, as far as it goes.
    (
        b"-",
        rb"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----",
        rb"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----(?:[^\"\\\r\n]|\\.)*?"
        rb"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----|(?=[\"\r\n])|\Z)",
    ),
    (b"s", rb"sk-[A-Za-z0-9_-]{20}", _token(rb"sk-", rb"[A-Za-z0-9_-]{20,}")),
    (b"sr", rb"[sr]k_(?:live|test)_[A-Za-z0-9]{16}", _token(rb"[sr]k_(?:live|test)_", rb"[A-Za-z0-9]{16,}")),
    (b"g", rb"gh[pousr]_[A-Za-z0-9]{30}", _token(rb"gh[pousr]_", rb"[A-Za-z0-9]{30,}")),
    (b"g", rb"github_pat_[A-Za-z0-9_]{20}", _token(rb"github_pat_", rb"[A-Za-z0-9_]{20,}")),
    (b"g", rb"glpat-[A-Za-z0-9_-]{20}", _token(rb"glpat-", rb"[A-Za-z0-9_-]{20,}")),
    (b"A", rb"A[KS]IA[A-Z0-9]{16}", _token(rb"A[KS]IA", rb"[A-Z0-9]{16}(?![A-Za-z0-9])", rb"A-Za-z0-9")),
    (b"x", rb"xox[abposr]-[A-Za-z0-9-]{10}", _token(rb"xox[abposr]-", rb"[A-Za-z0-9-]{10,}")),
    (b"A", rb"AIza[A-Za-z0-9_-]{35}", _token(rb"AIza", rb"[A-Za-z0-9_-]{35}")),
    (b"n", rb"npm_[A-Za-z0-9]{36}", _token(rb"npm_", rb"[A-Za-z0-9]{36}")),
    (b"h", rb"hf_[A-Za-z]{30}", _token(rb"hf_", rb"[A-Za-z]{30,}")),
    (
        b"e",
        rb"eyJ[A-Za-z0-9_-]{5,}\.eyJ",
        _token(rb"eyJ", rb"[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}(?:\.[A-Za-z0-9_-]+)?"),
    ),
    # From here on only the group v<n> is the secret; the rest says why.  A name is found by its
    # word, wherever in the name (OPENAI_API_KEY=, "apiKey":), except AUTH, which starts a name.
    (b"KTSPC", _NAME_WORD + rb"[A-Z0-9_]{0,64}" + _SET, _NAME_WORD + rb"[A-Z0-9_]{0,64}" + _VALUE),
    (b"A", rb"AUTH[A-Z0-9_]{0,64}" + _SET, _token(rb"AUTH", rb"[A-Z0-9_]{0,64}" + _VALUE, rb"A-Za-z0-9_")),
    # Credential files a model may print: ~/.aws/credentials, ~/.npmrc (//host/:_authToken=...).
    (
        b"aA:",
        rb"(?i:aws_secret_access_key|aws_session_token)" + _SET + rb"|:_(?:authToken|auth|password)=",
        rb"(?:(?i:aws_secret_access_key|aws_session_token)|:_(?:authToken|auth|password))" + _VALUE,
    ),
    # A Google OAuth access token (the Gemini and Qwen CLIs sign in with one).
    (b"y", rb"ya29\.[A-Za-z0-9_-]{20}", _token(rb"ya29\.", rb"[A-Za-z0-9_-]{20,}")),
    (
        b"aAsSpPtTcC",
        _JSON_WORD + rb"\\?\"\s*:",
        _JSON_WORD + rb"\\?\"\s*:\s*\\?\""
        # a value, not a variable's name ("env_key": "OPENAI_API_KEY")
        rb"(?![A-Z0-9_]+\\?\")(?P<v2>(?:[^\"\\\s]|\\[^\"\s]){8,}?)\\?\"",
    ),
    (
        b"aA",
        rb"(?i:authorization)\\?\"?\s*[:=]",
        rb"(?i:authorization)\\?\"?\s*[:=]\s*\\?\"?\s*(?:(?i:bearer|basic|token)\s+)?"
        rb"(?P<v3>[A-Za-z0-9._~+/=-]{8,})",
    ),
    (b"bB", rb"(?i:bearer)\s+[A-Za-z0-9._~+/=-]{20}", rb"(?i:bearer)\s+(?P<v4>[A-Za-z0-9._~+/=-]{20,})"),
    # The anchor's repeats are unbounded: a counted repeat is compiled into one state per count
    # (the bounded form made RE2's program 5x larger and took 5.5 ms of each process's first
    # compile); it finds a superset of what the exact pattern finds, which keeps its bounds.
    (
        b":",
        rb"://[^\s/:@\"'\\]+:[^\s/@\"'\\]{3,}@",
        rb"://[^\s/:@\"'\\]{1,256}:(?P<v5>[^\s/@\"'\\]{3,256})@",
    ),
]
_GROUPS = ("v1", "v2", "v3", "v4", "v5")
# A JSON escape a secret could hide behind: it sends its line to scrub_line, which decodes it.  No
# exact pattern starts with a backslash, so it never marks anything itself.
_ESCAPE_ANCHOR = rb"\\u[0-9A-Fa-f]{4}|\\/"


class Redactor:
    """Replaces secrets in bytes, strings and JSON values.  Cheap to share: once built, its only
    state is a cache of compiled patterns, which any thread may fill (each fills it alike).

    Build one per run with :meth:`for_environment` so the agent's own secrets are known by value."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        literals = sorted({form for v in values for form in _forms(v)}, key=len, reverse=True)
        self.longest = max((len(v) for v in literals), default=0)
        anchors = [re2.escape(v) for v in literals] + [a for _, a, _ in _KINDS] + [_ESCAPE_ANCHOR]
        self._anchors = re2.compile(b"|".join(anchors))
        # The exact patterns by the byte a match starts with: an anchor tries only its own few.
        # They are compiled when an anchor first starts with that byte: most runs print no secret,
        # and compiling them all took 4 ms of each process's first run.
        self._sources: dict[int, list[bytes]] = {}
        for first, source in [(v[:1], re.escape(v)) for v in literals] + [(f, e) for f, _, e in _KINDS]:
            for byte in first:
                self._sources.setdefault(byte, []).append(source)
        self._exact: dict[int, tuple[re.Pattern[bytes], ...]] = {}

    @classmethod
    def for_environment(cls, *envs: Mapping[str, str], extra: Iterable[str] = ()) -> Redactor:
        """A redactor that knows the values of every secret-looking variable of ``envs``, plus
        ``extra`` values (the env of MCP servers, say)."""
        values = [v for env in envs for k, v in env.items() if is_secret_name(k)]
        return cls([*values, *extra])

    def finds(self, data: bytes, pos: int = 0) -> tuple[int, int] | None:
        """The span of the first anchor at or after ``pos``: where a secret may be (None: nowhere)."""
        m = self._anchors.search(data, pos)
        return None if m is None else (m.start(), m.end())

    def scrub(self, data: bytes) -> bytes:
        """``data`` with every secret replaced; JSON stays valid where a substitution allows it (use
        :meth:`scrub_line` for a whole line, which always keeps it valid)."""
        spans = self._spans(data)
        if not spans:
            return data
        out: list[bytes] = []
        pos = 0
        for start, end in spans:
            # A secret right after a backslash would leave a broken escape ("\\[REDACTED]").
            if _odd_backslashes(data, start) and start > pos:
                start -= 1
            out += (data[pos:start], MARK)
            pos = end
        out.append(data[pos:])
        return b"".join(out)

    def _spans(self, data: bytes, pos: int = 0, whole: bool = False) -> list[tuple[int, int]]:
        """Where the secrets of ``data`` are, sorted, overlaps merged; ``whole``: the whole match,
        context included.  Every anchor is a candidate start: each exact pattern is tried there."""
        found: list[tuple[int, int]] = []
        while (hit := self._anchors.search(data, pos)) is not None:
            at = pos = hit.start()
            byte = data[at]
            patterns = self._exact.get(byte)
            if patterns is None:
                patterns = self._exact[byte] = tuple(map(re.compile, self._sources.get(byte, ())))
            for pattern in patterns:
                m = pattern.match(data, at)
                if m is not None:
                    found.append(m.span() if whole else _span(m))
                    pos = max(pos, m.end())
            # Past what matched: anchors inside it (a hostile "KEY=KEY=...") are not tried one by one.
            pos = max(pos, at + 1)
        found.sort()
        merged: list[tuple[int, int]] = []
        for start, end in found:
            if merged and start < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged

    def scrub_line(self, line: bytes) -> bytes:
        """One complete line: like :meth:`scrub`, and a line that was valid JSON stays valid JSON."""
        if (b"\\u" in line or b"\\/" in line) and _looks_json(line):
            # JSON may spell any character as an escape (\u0073k-..., Go's \u003c for "<"), which
            # hides a secret from patterns on bytes: judge the decoded strings instead.
            redone = self._decoded(line)
            if redone is not None:
                return redone
        out = self.scrub(line)
        if out is line or not _looks_json(line):
            return out
        try:
            orjson.loads(out)
        except orjson.JSONDecodeError:
            return self._json_line(line, out)
        return out

    def scrub_text(self, text: str) -> str:
        """A decoded string with every secret replaced."""
        data = text.encode("utf-8", "surrogatepass")
        out = self.scrub(data)
        return text if out is data else out.decode("utf-8", "surrogatepass")

    def scrub_value(self, value: Any) -> Any:
        """A JSON-like value (dicts, lists, strings ...) with every string redacted, keys included."""
        if isinstance(value, str):
            return self.scrub_text(value)
        if isinstance(value, dict):
            return {self.scrub_value(k): self.scrub_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub_value(v) for v in value]
        return value

    def safe_cut(self, data: bytes, cut: int) -> int:
        """A point at or before ``cut`` where ``data`` can be split without cutting a secret that
        the bytes after ``cut`` could still complete."""
        for start, end in self._spans(data, max(0, cut - self.longest - 4096), whole=True):
            if start < cut <= end or (start < cut and end == len(data)):
                return start
        return cut

    def _decoded(self, line: bytes) -> bytes | None:
        """The JSON line written anew with its decoded strings redacted; None when it is not JSON
        or holds no secret (then it is left as it was)."""
        body = line.rstrip(b"\r\n")
        try:
            parsed = orjson.loads(body)
            scrubbed = self.scrub_value(parsed)
            return None if scrubbed == parsed else orjson.dumps(scrubbed) + line[len(body) :]
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            return None

    def _json_line(self, line: bytes, fallback: bytes) -> bytes:
        # The substitution broke the line: redact the parsed strings and write the line anew.
        body = line.rstrip(b"\r\n")
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            return fallback  # it was not valid JSON to begin with: nothing to keep valid
        try:
            return orjson.dumps(self.scrub_value(parsed)) + line[len(body) :]
        except orjson.JSONEncodeError:
            return fallback


class StreamRedactor:
    """One stream's bytes in, redacted bytes out, with no secret missed at a chunk boundary.

    Complete lines are redacted and handed on at once; a partial line waits for its newline (or for
    :meth:`flush`).  A line longer than ``max_hold`` is handed on in pieces, each cut where no secret
    could straddle it.  A PEM key printed over many lines (not inside a JSON string) is redacted to
    its END line."""

    def __init__(self, redactor: Redactor, max_hold: int = 1 << 20) -> None:
        self._redactor = redactor
        self._max_hold = max_hold
        # What a spill keeps back: room for any secret whose start has not matched yet.
        self._carry = max(1024, 2 * redactor.longest + 16)
        self._held = bytearray()
        self._in_pem = False

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def feed(self, data: bytes) -> bytes:
        """Redacted bytes ready to be written (maybe empty)."""
        nl = data.rfind(b"\n")
        if nl < 0:
            self._held += data
            return self._spill() if len(self._held) > self._max_hold else b""
        block = bytes(self._held) + data[: nl + 1] if self._held else data[: nl + 1]
        self._held = bytearray(data[nl + 1 :])
        return self._lines(block)

    def flush(self) -> bytes:
        """Everything held, redacted (the line may be partial: the stream is being cut here)."""
        block = bytes(self._held)
        self._held.clear()
        return self._lines(block) if block else b""

    def _spill(self) -> bytes:
        # A very long line: hand on most of it, keeping back what could be the start of a secret.
        data = bytes(self._held)
        cut = len(data) - self._carry
        if cut <= 0:
            return b""
        # 0: one secret fills the hold; cut through it (each side is redacted as far as it matches).
        cut = self._redactor.safe_cut(data, cut) or cut
        self._held = bytearray(data[cut:])
        return self._redactor.scrub(data[:cut])

    def _lines(self, block: bytes) -> bytes:
        # Only the lines an anchor points at are looked at closely (a PEM in progress: all of them).
        out: list[bytes] = []
        pos = 0
        while pos < len(block):
            if self._in_pem:
                start = pos
            else:
                hit = self._redactor.finds(block, pos)
                if hit is None:
                    break
                start = block.rfind(b"\n", pos, hit[0]) + 1 or pos
            end = block.find(b"\n", start) + 1 or len(block)
            out += (block[pos:start], self._line(block[start:end]))
            pos = end
        if not out:
            return block  # the common case: one scan, no copy
        out.append(block[pos:])
        return b"".join(out)

    def _line(self, line: bytes) -> bytes:
        if self._in_pem:
            if _looks_json(line):  # a protocol line: whatever the PEM was, it ended
                self._in_pem = False
            else:
                end = _PEM_END.search(line)
                if end is None:
                    return MARK + line[len(line.rstrip(b"\r\n")) :]
                self._in_pem = False
                line = MARK + line[end.end() :]
        out = self._redactor.scrub_line(line)
        begin = _PEM_BEGIN.search(line)
        if begin is not None and not _looks_json(line) and _PEM_END.search(line, begin.end()) is None:
            self._in_pem = True
        return out


_PEM_BEGIN = re.compile(rb"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----")
_PEM_END = re.compile(rb"-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----")


def _forms(value: str) -> list[bytes]:
    """The ways ``value`` can appear in the log: as is, JSON-escaped (both ways), and line by line
    (a multi-line value printed to a terminal)."""
    if len(value) < MIN_VALUE:
        return []
    forms = {
        value.encode("utf-8", "surrogatepass"),
        json.dumps(value, ensure_ascii=False)[1:-1].encode("utf-8", "surrogatepass"),
        json.dumps(value)[1:-1].encode("ascii"),
    }
    forms.update(
        line.encode("utf-8", "surrogatepass") for line in value.splitlines() if len(line.strip()) >= MIN_VALUE
    )
    return [f for f in forms if f]


def _span(m: re.Match[bytes]) -> tuple[int, int]:
    if m.lastgroup is not None and m.lastgroup in _GROUPS:
        return m.span(m.lastgroup)
    return m.span()


def _odd_backslashes(data: bytes, at: int) -> bool:
    n = 0
    while at - n - 1 >= 0 and data[at - n - 1] == 0x5C:
        n += 1
    return n % 2 == 1


def _looks_json(line: bytes) -> bool:
    stripped = line.lstrip()
    return stripped[:1] in (b"{", b"[")
