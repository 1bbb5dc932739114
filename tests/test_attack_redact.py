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


# Attack: secrets in spellings the patterns did not know.  The agent's own variables whose names
# say "password" another way (MYSQL_PWD, SMTP_PASS, npm's _AUTH), a Google OAuth access token (the
# Gemini and Qwen CLIs log in with one), and the credential files a model is likely to print:
# ~/.aws/credentials, ~/.npmrc, a compose file's "NAME: value".
OWN = {
    "MYSQL_PWD": "mysql-pw-0123456",
    "SMTP_PASS": "smtp-pw-0123456",
    "NPM_CONFIG__AUTH": "bnBtOnNlY3JldDEyMw==",
    "BASIC_AUTH": "user:basic-pw-42",
}
FILES = {
    "[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n": "wJalrXUtnFEMI",
    "aws_session_token=IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJH\n": "IQoJb3JpZ2luX2Vj",
    "//registry.npmjs.org/:_authToken=npm-secret-value-1234\n": "npm-secret-value",
    "    GITHUB_TOKEN: token-in-compose-file-99\n": "token-in-compose",
    "DB_PASSWORD = 'spaced-assignment-77'\n": "spaced-assignment",
    "gemini: ya29.a0AfH6SMBx-Yq3kZ9TOKEN_abcdefghijklmnopqrstuv\n": "ya29.a0AfH6SMBx",
}


@pytest.mark.parametrize("name", sorted(OWN))
def test_the_agents_own_password_variables_are_secret(name: str) -> None:
    redactor = Redactor.for_environment(OWN)
    line = f'{{"type":"text","text":"here: {OWN[name]}"}}\n'.encode()
    stream = StreamRedactor(redactor)
    written = stream.feed(line) + stream.flush()
    assert OWN[name].encode() not in written and MARK in written
    orjson.loads(written)


def test_a_variable_that_only_looks_like_one_is_not_secret() -> None:
    from orchestrate.process.redact import is_secret_name

    assert not any(is_secret_name(n) for n in ("PWD", "OLDPWD", "GIT_AUTHOR_NAME", "AUTHOR", "PASSAGE"))


@pytest.mark.parametrize("text", sorted(FILES))
def test_credential_files_printed_by_the_model_are_redacted(text: str) -> None:
    for line in (text.encode(), orjson.dumps({"type": "tool_result", "content": text}) + b"\n"):
        stream = StreamRedactor(Redactor())
        written = stream.feed(line) + stream.flush()
        assert FILES[text].encode() not in written and MARK in written
