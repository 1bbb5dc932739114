"""Attacks on raw-log redaction: a secret spelled with JSON escapes that a byte pattern cannot see.
Each line goes through the real raw log writer's stream redactor, and the test decodes what would
be written, as any reader of the log would."""

from __future__ import annotations

import orjson
import pytest

from orchestrate.process.redact import MARK, Redactor, StreamRedactor

KEY = "sk-ant-api03-" + "Q7x" * 14
PASSWORD = "p@ss<w0rd>&more-secret"
REDACTOR = Redactor.for_environment({"ANTHROPIC_API_KEY": KEY, "DB_PASSWORD": PASSWORD})


def escaped(text: str) -> str:
    """Every character as a \\uXXXX escape: valid JSON, and what some encoders write."""
    return "".join(f"\\u{ord(c):04x}" for c in text)


LINES = [
    '{"type":"text","text":"\\u0073k-ant-api03-' + "Q7x" * 14 + '"}',
    '{"type":"text","text":"key: ' + escaped(KEY) + '"}',
    '{"out":"' + escaped(PASSWORD) + '"}',
    '{"out":"p@ss\\u003cw0rd\\u003e\\u0026more-secret"}',  # Go's encoder: <, > and & escaped
    '[1, {"nested": ["x ' + escaped(KEY[:5]) + KEY[5:] + ' y"]}]',
]


@pytest.mark.parametrize("line", LINES)
def test_a_secret_behind_json_escapes_is_redacted(line: str) -> None:
    decoded = orjson.loads(line)
    assert KEY in str(decoded) or PASSWORD in str(decoded)  # the line really carries the secret
    stream = StreamRedactor(REDACTOR)
    written = stream.feed(line.encode() + b"\n") + stream.flush()
    text = str(orjson.loads(written))  # still valid JSON
    assert KEY not in text and PASSWORD not in text
    assert MARK.decode() in text


def test_escapes_without_a_secret_leave_the_line_byte_for_byte() -> None:
    line = b'{"text":"\\u001b[31mred\\u001b[0m \\/ok", "n": 1.50}\n'
    stream = StreamRedactor(REDACTOR)
    assert stream.feed(line) + stream.flush() == line
