"""The redaction scanner against a reference copy of the one it replaced: same spans, same output.

The scanner's two parts can change for speed (the anchors RE2 searches every byte with, and when
the exact patterns are compiled); what it finds must not.  ``Reference`` below is the scanner as
it was before (its anchors written out here, the exact patterns compiled up front, its loop
verbatim), sharing only the module's exact patterns, which say what a secret is.  Random text
with secrets of every kind inserted, JSON escapes and hostile runs (many anchors in a row,
``KEY=KEY=...``, long lines, a URL's user part past the exact pattern's bound) must give the same
spans, the same scrubbed bytes, and the same stream output whatever the chunk boundaries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

import orjson
import pytest
import re2
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from orchestrate.process import redact
from orchestrate.process.redact import Redactor, StreamRedactor

# The anchors as they were (the URL's user and password parts bounded by counted repeats).
_NAME_WORD = rb"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE)"
_JSON_WORD = rb"(?i:api[_-]?key|secret|passw(?:or)?d|token|private[_-]?key|credentials?)"
_SET = rb"[ \t]{0,8}[=:]"
OLD_ANCHORS = [
    rb"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----",
    rb"sk-[A-Za-z0-9_-]{20}",
    rb"[sr]k_(?:live|test)_[A-Za-z0-9]{16}",
    rb"gh[pousr]_[A-Za-z0-9]{30}",
    rb"github_pat_[A-Za-z0-9_]{20}",
    rb"glpat-[A-Za-z0-9_-]{20}",
    rb"A[KS]IA[A-Z0-9]{16}",
    rb"xox[abposr]-[A-Za-z0-9-]{10}",
    rb"AIza[A-Za-z0-9_-]{35}",
    rb"npm_[A-Za-z0-9]{36}",
    rb"hf_[A-Za-z]{30}",
    rb"eyJ[A-Za-z0-9_-]{5,}\.eyJ",
    _NAME_WORD + rb"[A-Z0-9_]{0,64}" + _SET,
    rb"AUTH[A-Z0-9_]{0,64}" + _SET,
    rb"(?i:aws_secret_access_key|aws_session_token)" + _SET + rb"|:_(?:authToken|auth|password)=",
    rb"ya29\.[A-Za-z0-9_-]{20}",
    _JSON_WORD + rb"\\?\"\s*:",
    rb"(?i:authorization)\\?\"?\s*[:=]",
    rb"(?i:bearer)\s+[A-Za-z0-9._~+/=-]{20}",
    rb"://[^\s/:@\"'\\]{1,256}:[^\s/@\"'\\]{3,256}@",
]


class Reference(Redactor):
    """The scanner as it was: old anchors, every exact pattern compiled up front, the same loop."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        literals = sorted({form for v in values for form in redact._forms(v)}, key=len, reverse=True)
        self.longest = max((len(v) for v in literals), default=0)
        anchors = [re2.escape(v) for v in literals] + OLD_ANCHORS + [redact._ESCAPE_ANCHOR]
        assert len(OLD_ANCHORS) == len(redact._KINDS)  # a new kind needs its anchor here too
        self._anchors = re2.compile(b"|".join(anchors))
        kinds = [(v[:1], re.compile(re.escape(v))) for v in literals]
        kinds += [(first, re.compile(exact)) for first, _, exact in redact._KINDS]
        self._eager: dict[int, list[re.Pattern[bytes]]] = {}
        for first, pattern in kinds:
            for byte in first:
                self._eager.setdefault(byte, []).append(pattern)

    def _spans(self, data: bytes, pos: int = 0, whole: bool = False) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        while (hit := self._anchors.search(data, pos)) is not None:
            at = pos = hit.start()
            for pattern in self._eager.get(data[at], ()):
                m = pattern.match(data, at)
                if m is not None:
                    found.append(m.span() if whole else redact._span(m))
                    pos = max(pos, m.end())
            pos = max(pos, at + 1)
        found.sort()
        merged: list[tuple[int, int]] = []
        for start, end in found:
            if merged and start < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged


VALUES = ["hunter2hunter2", "pa ss\nword-of-the-env-0123", "ünïcødé-sécret-välue"]


def _body(alphabet: str, low: int, high: int) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from(alphabet), min_size=low, max_size=high)


ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
TOKEN = ALNUM + "_-"
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"


def _cased(word: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
        lambda flips: "".join(c.upper() if f else c.lower() for c, f in zip(word, flips, strict=True))
    )


SECRETS: list[st.SearchStrategy[str]] = [
    st.builds(lambda b: "sk-" + b, _body(TOKEN, 18, 40)),
    st.builds(
        lambda p, k, b: f"{p}k_{k}_{b}",
        st.sampled_from("sr"),
        st.sampled_from(["live", "test"]),
        _body(ALNUM, 14, 24),
    ),
    st.builds(lambda c, b: f"gh{c}_{b}", st.sampled_from("pousr"), _body(ALNUM, 28, 40)),
    st.builds(lambda b: "github_pat_" + b, _body(ALNUM + "_", 18, 30)),
    st.builds(lambda b: "glpat-" + b, _body(TOKEN, 18, 26)),
    st.builds(lambda c, b: f"A{c}IA{b}", st.sampled_from("KS"), _body(UPPER[:-1], 15, 18)),
    st.builds(lambda c, b: f"xox{c}-{b}", st.sampled_from("abposr"), _body(ALNUM + "-", 9, 20)),
    st.builds(lambda b: "AIza" + b, _body(TOKEN, 34, 36)),
    st.builds(lambda b: "npm_" + b, _body(ALNUM, 35, 37)),
    st.builds(lambda b: "hf_" + b, _body("abcdefXYZ", 29, 34)),
    st.builds(
        lambda a, b, c: f"eyJ{a}.eyJ{b}.{c}", _body(TOKEN, 4, 20), _body(TOKEN, 4, 20), _body(TOKEN, 0, 20)
    ),
    st.builds(
        lambda kind, body, end: f"-----BEGIN {kind}PRIVATE KEY-----{body}{end}",
        st.sampled_from(["", "RSA ", "EC ", "OPENSSH "]),
        st.sampled_from(["\nMIIEfake0123+/=\nMIIEfake\n", "\\nMIIEfake0123+/=\\n", "abc", ""]),
        st.sampled_from(["-----END RSA PRIVATE KEY-----", "", '"', "\n"]),
    ),
    st.builds(
        lambda pre, word, post, sep, q, v: f"{pre}{word}{post}{sep}{q}{v}{q}",
        _body(UPPER, 0, 8),
        st.sampled_from(["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE", "AUTH"]),
        _body(UPPER, 0, 70),
        st.sampled_from(["=", " = ", ": ", ":", "\t=\t", "=="]),
        st.sampled_from(["", '"', "'", '\\"']),
        _body(ALNUM + "+/.", 4, 24),
    ),
    st.builds(
        lambda w, sep, v: f"{w}{sep}{v}",
        st.one_of(
            _cased("aws_secret_access_key"),
            _cased("aws_session_token"),
            st.sampled_from([":_authToken", ":_auth", ":_password"]),
        ),
        st.sampled_from(["=", " = ", ":"]),
        _body(ALNUM + "/+", 4, 40),
    ),
    st.builds(lambda b: "ya29." + b, _body(TOKEN, 18, 40)),
    st.builds(
        lambda w, q, sep, v: f"{q}{w}{q}{sep}{q}{v}{q}",
        st.one_of(
            *(
                _cased(w)
                for w in [
                    "apikey",
                    "api_key",
                    "api-key",
                    "secret",
                    "password",
                    "passwd",
                    "token",
                    "private_key",
                    "credentials",
                    "credential",
                ]
            )
        ),
        st.sampled_from(['"', '\\"']),
        st.sampled_from([":", ": ", " :\n "]),
        st.one_of(_body(ALNUM + "\\n", 5, 30), st.just("OPENAI_API_KEY")),
    ),
    st.builds(
        lambda w, q, sep, scheme, v: f"{q}{w}{q}{sep}{scheme}{v}",
        _cased("authorization"),
        st.sampled_from(["", '"', '\\"']),
        st.sampled_from([": ", "=", ":"]),
        st.sampled_from(["", "Bearer ", "basic ", "token "]),
        _body(ALNUM + "._~+/=-", 6, 40),
    ),
    st.builds(lambda w, v: f"{w} {v}", _cased("bearer"), _body(ALNUM + "._~+/=-", 18, 40)),
    st.builds(
        lambda scheme, user, pw: f"{scheme}://{user}:{pw}@host/x",
        st.sampled_from(["https", "postgres", "redis"]),
        st.one_of(_body(ALNUM, 1, 12), _body("u", 250, 300)),
        st.one_of(_body(ALNUM + ":", 2, 12), _body("p", 250, 300)),
    ),
    st.sampled_from(VALUES),
    st.sampled_from([json.dumps(v)[1:-1] for v in VALUES]),
]
ESCAPES = st.sampled_from(["\\n", '\\"', "\\\\", "\\u0041", "\\/", "\\u0073k-", "\\t", "\\u00e9"])
HOSTILE = st.builds(
    lambda piece, n: piece * n,
    st.sampled_from(
        [
            "KEY=",
            "sk-",
            "://",
            ":",
            "TOKEN_",
            "AKIA",
            "eyJ",
            "\\u",
            '"token":',
            "://a:",
            "A" * 7,
            "-----BEGIN ",
        ]
    ),
    st.integers(1, 400),
)
FILLER = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60)
PIECES = st.lists(
    st.one_of(
        FILLER,
        st.one_of(*SECRETS),
        ESCAPES,
        HOSTILE,
        st.just("\n"),
        st.binary(max_size=8).map(lambda b: b.decode("latin-1")),
    ),
    max_size=40,
)


def _text(pieces: list[str]) -> bytes:
    return "".join(pieces).encode("utf-8", "surrogatepass")


NEW = Redactor(VALUES)
OLD = Reference(VALUES)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PIECES)
def test_the_scanner_finds_the_same_spans_as_before(pieces: list[str]) -> None:
    data = _text(pieces)
    assert NEW._spans(data) == OLD._spans(data)
    assert NEW._spans(data, whole=True) == OLD._spans(data, whole=True)
    assert NEW.scrub(data) == OLD.scrub(data)
    for line in data.splitlines(keepends=True):
        assert NEW.scrub_line(line) == OLD.scrub_line(line)
    for cut in (len(data) // 3, len(data) // 2):
        assert NEW.safe_cut(data, cut) == OLD.safe_cut(data, cut)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def _stream(redactor: Redactor, chunks: list[bytes], max_hold: int = 1 << 20) -> bytes:
    s = StreamRedactor(redactor, max_hold=max_hold)
    return b"".join(s.feed(c) for c in chunks) + s.flush()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PIECES, st.lists(st.integers(0, 20_000), max_size=12))
def test_a_stream_cut_anywhere_gives_what_the_old_scanner_gives_whole(
    pieces: list[str], cuts: list[int]
) -> None:
    data = _text(pieces)
    # Lines within the hold are redacted whole, so no chunk boundary changes the output; and a
    # JSON line (a protocol's) as the CLIs print it, secrets across the boundary included.
    assert _stream(NEW, _split(data, cuts)) == _stream(OLD, [data])
    line = orjson_line("".join(pieces))
    assert _stream(NEW, _split(line, cuts)) == _stream(OLD, [line])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PIECES, st.lists(st.integers(0, 20_000), max_size=12))
def test_long_lines_spilled_in_pieces_match_the_old_scanner(pieces: list[str], cuts: list[int]) -> None:
    # A hold far below the lines' length: lines go out in pieces cut where no secret straddles.
    data = _text(pieces) * 3
    chunks = _split(data, cuts)
    assert _stream(NEW, chunks, max_hold=64) == _stream(OLD, chunks, max_hold=64)


def orjson_line(text: str) -> bytes:
    return (
        orjson.dumps({"type": "x", "text": text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")})
        + b"\n"
    )


@pytest.mark.parametrize("index", range(len(SECRETS)))
def test_every_kind_of_secret_generated_here_is_one_the_scanner_finds(index: int) -> None:
    # The differential tests compare something: each generator makes secrets both scanners redact.
    def redacted(secret: str) -> bool:
        data = f"log: {secret} end".encode("utf-8", "surrogatepass")
        return bool(OLD._spans(data)) and NEW._spans(data) == OLD._spans(data)

    find(
        SECRETS[index], redacted, settings=settings(database=None, max_examples=200, phases=[Phase.generate])
    )


def test_a_huge_run_of_anchors_is_linear() -> None:
    # Hostile: every position an anchor start.  Both finish, and alike.
    for piece in (b"KEY=", b"sk-", b"://a:", b"\\u0041", b'"token":'):
        data = piece * 50_000
        assert NEW._spans(data) == OLD._spans(data)
