"""The raw log keeps secrets and never takes a run down: private modes, redaction (whole and cut
across chunks), the off switch, write failures mid-run, and replay of damaged logs.

Every key here is fake and built at run time (no scanner should mistake this file for a leak)."""

from __future__ import annotations

import errno
import io
import json
import os
import resource
import shlex
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrate import AutoDeny, Run, Task
from orchestrate.entries import ErrorEntry
from orchestrate.executors.base import ExecutorOptions
from orchestrate.executors.claude_code import ClaudeCodeExecutor
from orchestrate.process.rawlog import DAMAGED, RAW_LOG_FAILED, RawLogWriter, read_raw_log
from orchestrate.process.redact import MARK, Redactor, StreamRedactor, redaction_enabled
from orchestrate.replay import replay
from orchestrate.run import RunResult

from .helpers import CLI_BIN, FAST, needs_cli, wait_for

pytestmark = pytest.mark.anyio

# --- fake secrets, one per known format -------------------------------------------------------

FAKE_KEYS = {
    "anthropic": "sk-ant-api03-" + "FAKEfake0123" * 6,
    "openai": "sk-proj-" + "FAKEfake0123" * 4,
    "github classic": "ghp_" + "FAKEfake01" * 4,
    "github oauth": "gho_" + "FAKEfake01" * 4,
    "github server": "ghs_" + "FAKEfake01" * 4,
    "github fine-grained": "github_pat_" + "FAKE_fake_0123" * 4,
    "gitlab": "glpat-" + "FAKEfake0123" * 2,
    "aws": "AKIA" + "FAKEFAKE01234567",
    "slack": "xoxb-" + "1234567890-FAKEfake",
    "google": "AIza" + "FAKEfake012345678901234567890123456",
    "stripe": "sk_live_" + "FAKEfake01234567",
    "npm": "npm_" + "FAKEfake0123456789" * 2,
    "huggingface": "hf_" + "FAKEfakeFAKEfake" * 2,
    "jwt": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiJmYWtlIn0" + ".FAKEfakeSignature_-",
}
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + "\n".join(["MIIEFAKEfakeFAKEfakeFAKEfakeFAKEfakeFAKEfake0123456789+/="] * 5)
    + "\n-----END RSA PRIVATE KEY-----"
)


def json_line(obj: Any) -> bytes:
    return orjson.dumps(obj) + b"\n"


def no_secret(data: bytes, *secrets: str) -> bool:
    """None of ``secrets`` (or any 12 characters of one, for the long ones) is in ``data``,
    as is or JSON-escaped."""
    for secret in secrets:
        for form in (secret, json.dumps(secret)[1:-1]):
            raw = form.encode()
            if raw in data or (len(raw) > 24 and raw[4:16] in data):
                return False
    return True


# --- redaction ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(FAKE_KEYS))
def test_each_known_key_format_is_redacted_in_text_and_in_json(kind: str) -> None:
    key = FAKE_KEYS[kind]
    redactor = Redactor()
    text = f"the key is {key}, keep it safe\n".encode()
    assert redactor.scrub_line(text) == b"the key is [REDACTED], keep it safe\n"
    line = json_line({"type": "assistant", "text": f"use {key}\nthen", "n": 1})
    out = redactor.scrub_line(line)
    assert key.encode() not in out
    assert orjson.loads(out) == {"type": "assistant", "text": "use [REDACTED]\nthen", "n": 1}


def test_a_pem_private_key_is_redacted_in_a_json_string_and_over_many_lines_of_text() -> None:
    redactor = Redactor()
    out = redactor.scrub_line(json_line({"out": f"key:\n{PEM}\ndone"}))
    assert orjson.loads(out) == {"out": "key:\n[REDACTED]\ndone"}
    stream = StreamRedactor(redactor)
    text = f"cat id_rsa\n{PEM}\nafter the key\n".encode()
    out = stream.feed(text) + stream.flush()
    assert no_secret(out, "MIIEFAKEfake") and b"after the key\n" in out and out.startswith(b"cat id_rsa\n")
    # A protocol line after an unterminated PEM is left whole and valid.
    stream = StreamRedactor(redactor)
    out = stream.feed(b"-----BEGIN PRIVATE KEY-----\nMIIEFAKE\n" + json_line({"type": "result"}))
    assert out.endswith(json_line({"type": "result"})) and b"MIIEFAKE" not in out


def test_secret_looking_assignments_are_redacted_as_env_prints_them() -> None:
    env_output = (
        "HOME=/home/dev\n"
        "OPENAI_API_KEY=not-a-known-format-123\n"
        "export MY_SERVICE_TOKEN='abcdef123456'\n"
        "DB_PASSWORD=hunter2hunter2\n"
        "AUTH_HEADER=whatever-value-1\n"
        "GCP_CREDENTIALS=some-credential-9\n"
        "PRIVATE_THING=some-private-8\n"
        "MAX_TOKENS=4096\n"
        "PATH=/usr/bin\n"
    )
    out = Redactor().scrub_line(json_line({"output": env_output})).decode()
    secrets = ("not-a-known-format-123", "abcdef123456", "hunter2hunter2", "whatever-value-1")
    for value in (*secrets, "some-credential-9", "some-private-8"):
        assert value not in out
    for kept in ("HOME=/home/dev", "MAX_TOKENS=4096", "PATH=/usr/bin", "OPENAI_API_KEY=[REDACTED]"):
        assert kept in out


def test_headers_urls_and_settings_are_redacted() -> None:
    redactor = Redactor()
    cases = {
        b"Authorization: Bearer abc.DEF-ghi_jkl~mno+pqr/stu=\n": b"Authorization: Bearer [REDACTED]\n",
        b"curl -H 'authorization: token 0123456789abcdef'\n": b"curl -H 'authorization: token [REDACTED]'\n",
        b"origin https://me:pa55w0rd-fake@github.com/x.git\n": b"origin https://me:[REDACTED]@github.com/x.git\n",
    }
    for line, expected in cases.items():
        assert redactor.scrub_line(line) == expected
    settings_line = json_line(
        {"security": {"auth": {"apiKey": "plain-fake-value-42"}}, "clientSecret": "x" * 9}
    )
    assert orjson.loads(redactor.scrub_line(settings_line)) == {
        "security": {"auth": {"apiKey": "[REDACTED]"}},
        "clientSecret": "[REDACTED]",
    }


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"system","apiKeySource":"ANTHROPIC_API_KEY","env_key":"OPENAI_API_KEY"}\n',
        b'{"usage":{"input_tokens":12,"output_tokens":5,"max_tokens":4096}}\n',
        b"task-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa and desk-bbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n",
        b"The authorization step is pending; the token count is low.\n",
        b"MAX_TOKENS=4096 KEY=short\n",
        b"https://github.com/org/repo and ssh://git@host:22/x\n",
    ],
)
def test_ordinary_text_is_left_alone(line: bytes) -> None:
    # Refusing everything would pass the other tests: these must come through byte for byte.
    redactor = Redactor.for_environment({"SHORT_TOKEN": "abc", "HOME": "/home/someone-long"})
    assert redactor.scrub_line(line) == line


def test_the_agents_own_secret_values_are_redacted_wherever_they_appear() -> None:
    env = {
        "FAKE_DB_PASSWORD": "correct-horse-battery",
        "WEIRD_SECRET": 'quo"te\\back\tslash-é-value',
        "MULTI_LINE_CREDENTIALS": "line-one-of-it\nline-two-of-it",
        "SHORT_KEY": "1234567",  # too short to redact without wrecking the log
        "PUBLIC_URL": "https://example.invalid/not-secret",
    }
    redactor = Redactor.for_environment(env)
    assert (
        redactor.scrub_line(b"the password is correct-horse-battery.\n") == b"the password is [REDACTED].\n"
    )
    weird = json_line({"text": f"v={env['WEIRD_SECRET']}!"})
    assert orjson.loads(redactor.scrub_line(weird)) == {"text": "v=[REDACTED]!"}
    ascii_escaped = json.dumps({"text": env["WEIRD_SECRET"]}).encode() + b"\n"
    assert b"back" not in redactor.scrub_line(ascii_escaped)
    assert redactor.scrub_line(b"line-two-of-it\n") == b"[REDACTED]\n"
    kept = b"1234567 https://example.invalid/not-secret\n"
    assert redactor.scrub_line(kept) == kept


@pytest.mark.parametrize(
    "hostile",
    [
        b"KEY=" * 100_000,
        b"KEY" * 100_000 + b"=",
        b"-----BEGIN PRIVATE KEY-----" * 15_000,
        b"AKIA" * 100_000,
        b'"token": "' * 40_000,
        b"authorization: " * 25_000,
        b"eyJaaaaaa.eyJ" * 30_000,
        b"://a:b" * 60_000 + b"@",
    ],
    ids=["assignments", "long-name", "pem", "aws", "json", "authorization", "jwt", "url"],
)
def test_hostile_output_is_scrubbed_in_linear_time(hostile: bytes) -> None:
    # Each is about 400 kB of anchors; one try per anchor from the start made these minutes long.
    redactor = Redactor.for_environment({"X_TOKEN": "abcdefghijkl"})
    started = time.monotonic()
    out = redactor.scrub_line(hostile + b"\n")
    assert time.monotonic() - started < 5
    assert out.endswith(b"\n")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.text(max_size=20),
    suffix=st.text(max_size=20),
    kind=st.sampled_from(sorted(FAKE_KEYS)),
    backslashes=st.integers(0, 3),
)
def test_a_json_line_stays_valid_json_whatever_surrounds_the_secret(
    prefix: str, suffix: str, kind: str, backslashes: int
) -> None:
    key = FAKE_KEYS[kind]
    # A value starting with "n" also matches the n of a "\n" escape in the JSON text: redacting
    # from there must take the backslash along, or the line would break.
    token = "n" + key[-12:] + "tail"
    value = prefix + " " + "\\" * backslashes + key + "\n" + token[1:] + " " + token + suffix
    line = json_line({"text": value, "after": [1, "x"]})
    out = Redactor.for_environment({"SOME_TOKEN": token}).scrub_line(line)
    parsed = orjson.loads(out)  # raises if the line broke
    assert parsed["after"] == [1, "x"]
    assert key not in parsed["text"] and token not in parsed["text"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_secret_cut_across_chunks_is_redacted_exactly_as_if_whole(data: st.DataObject) -> None:
    keys = list(FAKE_KEYS.values())
    lines = [
        json_line({"type": "assistant", "text": f"here: {keys[i % len(keys)]} ok"}) for i in range(6)
    ] + [b"OPENAI_API_KEY=plain-but-named-secret\n", b"partial GITHUB_TOKEN=" + keys[2].encode()]
    stream_bytes = b"".join(lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream_bytes)), max_size=12)))
    hold = data.draw(st.sampled_from([64, 4096, 1 << 20]))
    redactor = Redactor()
    split, whole = StreamRedactor(redactor, max_hold=hold), StreamRedactor(redactor)
    pieces = [stream_bytes[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream_bytes)], strict=True)]
    out = b"".join(split.feed(piece) for piece in pieces) + split.flush()
    assert no_secret(out, *keys, "plain-but-named-secret")
    expected = whole.feed(stream_bytes) + whole.flush()
    if hold > len(stream_bytes):
        assert out == expected  # no spill: the cuts change nothing at all
    else:
        assert out.count(MARK) >= expected.count(MARK)
    for line in out.splitlines()[:6]:
        orjson.loads(line)


def test_a_line_longer_than_the_hold_is_spilled_without_cutting_a_secret() -> None:
    key = FAKE_KEYS["anthropic"]
    redactor = Redactor()
    stream = StreamRedactor(redactor, max_hold=4096)
    body = b"x " * 3000 + key.encode() + b" " + b"y " * 3000
    out = b""
    for i in range(0, len(body), 97):  # the key straddles several chunks and a spill point
        out += stream.feed(body[i : i + 97])
    out += stream.feed(b"\n") + stream.flush()
    assert key.encode() not in out and out.count(MARK) == 1
    assert out.replace(MARK, b"") == body.replace(key.encode(), b"") + b"\n"


def test_the_off_switch_reads_the_environment() -> None:
    assert redaction_enabled({})
    assert redaction_enabled({"ORCHESTRATE_REDACT": "1"})
    for off in ("0", "false", "NO", " off "):
        assert not redaction_enabled({"ORCHESTRATE_REDACT": off})


# --- the writer: modes, batching, failures ------------------------------------------------------


def test_files_are_0600_and_made_directories_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        log = RawLogWriter(tmp_path / "a" / "b" / "run.jsonl", {"executor": "t"})
        log.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b" / "run.jsonl").stat().st_mode) == 0o600
    # A umask that would leave the owner without access cannot either.
    old = os.umask(0o277)
    try:
        RawLogWriter(tmp_path / "c" / "run.jsonl", {}).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "c" / "run.jsonl").stat().st_mode) == 0o600


def test_an_existing_file_is_tightened_and_only_our_own_directory_is(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    old = shared / "run.jsonl"
    old.write_text("old contents")
    old.chmod(0o644)
    RawLogWriter(old, {}).close()
    assert stat.S_IMODE(old.stat().st_mode) == 0o600 and "old contents" not in old.read_text()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755  # a directory the user named is theirs
    RawLogWriter(shared / "other.jsonl", {}, private_dir=True).close()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o700  # the default runs directory is ours


def test_a_symlink_in_place_of_the_log_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("precious")
    (tmp_path / "run.jsonl").symlink_to(target)
    log = RawLogWriter(tmp_path / "run.jsonl", {})
    log.chunk("stdout", b"x\n", 1.0)
    log.close()
    assert target.read_text() == "precious"
    failure = log.take_failure()
    assert failure is not None and "could not be opened" in failure and not log.opened
    assert log.take_failure() is None  # reported once


def test_a_log_that_cannot_be_opened_fails_quietly(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    log = RawLogWriter(tmp_path / "file" / "run.jsonl", {})  # a file where a directory should be
    log.chunk("stdout", b"x\n", 1.0)
    log.event({"type": "approval"}, 1.0)
    log.flush()
    log.close()
    assert log.failure is not None and "Not a directory" in log.failure


class FakeFile(io.RawIOBase):
    """Records each write; fails with ENOSPC once ``room`` bytes are taken (None: never)."""

    def __init__(self, room: int | None = None) -> None:
        self.room = room
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        if self.room is not None and sum(map(len, self.writes)) + len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.writes.append(data)
        return len(data)


def test_writes_are_batched_not_one_per_chunk(tmp_path: Path) -> None:
    fake = FakeFile()
    log = RawLogWriter(tmp_path / "x", {}, opener=lambda _: fake, flush_seconds=3600)  # type: ignore[arg-type,return-value]
    for i in range(1000):
        log.chunk("stdout", b'{"n": %d}\n' % i, float(i))
    assert fake.writes == []
    log.flush()  # a turn's end
    assert len(fake.writes) == 1
    log.close()
    lines = b"".join(fake.writes).splitlines()
    assert len(lines) == 1001 and orjson.loads(lines[-1])["data"] == '{"n": 999}\n'
    # The byte bound flushes without being asked.
    fake = FakeFile()
    log = RawLogWriter(tmp_path / "y", {}, opener=lambda _: fake, flush_seconds=3600, flush_bytes=10_000)  # type: ignore[arg-type,return-value]
    for i in range(1000):
        log.chunk("stdout", b"%d\n" % i, 0.0)
    assert len(fake.writes) >= 2 and all(len(w) >= 10_000 for w in fake.writes)


def test_a_full_disk_turns_the_log_off_and_is_reported_once(tmp_path: Path) -> None:
    fake = FakeFile(room=1000)
    log = RawLogWriter(tmp_path / "x", {}, opener=lambda _: fake, flush_bytes=100)  # type: ignore[arg-type,return-value]
    for i in range(100):
        log.chunk("stdout", b"line %d\n" % i, 0.0)
    failure = log.take_failure()
    assert failure is not None and "No space left on device" in failure
    writes = len(fake.writes)
    log.chunk("stdout", b"more\n", 0.0)
    log.event({"type": "x"}, 0.0)
    log.close()
    assert len(fake.writes) == writes and log.take_failure() is None


def test_dev_full_fails_at_the_first_flush_and_keeps_its_mode() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    before = os.stat("/dev/full")
    log = RawLogWriter(Path("/dev/full"), {"executor": "t"})
    assert log.opened and log.failure is None
    log.chunk("stdout", b"x\n", 0.0)
    log.flush()
    assert log.failure is not None and "No space left on device" in log.failure
    after = os.stat("/dev/full")
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)


def test_unredacted_chunks_are_stored_exactly_as_read(tmp_path: Path) -> None:
    key = FAKE_KEYS["openai"]
    pieces = [b'{"text": "' + key[:9].encode(), key[9:].encode() + b'"}\n{"par', b'tial"}']
    log = RawLogWriter(tmp_path / "raw.jsonl", {"argv": ["x", key]}, redactor=None)
    for piece in pieces:
        log.chunk("stdout", piece, 1.0)
    log.close()
    header, records = read_raw_log(tmp_path / "raw.jsonl")
    assert header is not None and header["argv"] == ["x", key]
    assert [r.data for r in records] == pieces


def test_redacted_chunks_are_regrouped_by_line_and_events_keep_their_place(tmp_path: Path) -> None:
    key = FAKE_KEYS["openai"]
    log = RawLogWriter(tmp_path / "raw.jsonl", {"argv": ["x", f"--key={key}"]}, redactor=Redactor())
    log.chunk("stdout", b'{"text": "' + key[:9].encode(), 1.0)
    log.event({"type": "approval", "command": f"curl -H 'Authorization: Bearer {key}'"}, 2.0)
    log.chunk("stdout", key[9:].encode() + b'"}\n{"par', 3.0)
    log.event({"type": "exit", "code": 0}, 4.0)  # an exit cuts: what is held goes first
    log.chunk("stdout", b'tial"}', 5.0)
    log.close()
    raw = (tmp_path / "raw.jsonl").read_bytes()
    assert no_secret(raw, key)
    header, records = read_raw_log(tmp_path / "raw.jsonl")
    assert header is not None and header["argv"] == ["x", "--key=[REDACTED]"]
    got = [(r.event["type"] if r.event else r.data, r.ts.timestamp() if r.ts else None) for r in records]
    assert got == [
        ("approval", 2.0),
        (b'{"text": "[REDACTED]"}\n', 3.0),
        (b'{"par', 3.0),
        ("exit", 4.0),
        (b'tial"}', 5.0),
    ]


def test_a_screen_log_writes_what_is_held_before_every_event(tmp_path: Path) -> None:
    log = RawLogWriter(tmp_path / "raw.jsonl", {}, redactor=Redactor(), screen=True)
    log.chunk("stdout", b"\x1b[2J> partial prompt", 1.0)
    log.event({"type": "screen"}, 2.0)
    log.close()
    records = list(read_raw_log(tmp_path / "raw.jsonl")[1])
    assert [r.data or r.event for r in records] == [b"\x1b[2J> partial prompt", {"type": "screen"}]


# --- replay of damaged logs ---------------------------------------------------------------------


def make_log(tmp_path: Path) -> Path:
    log = RawLogWriter(tmp_path / "raw.jsonl", {"executor": "claude-code"}, redactor=None)
    lines = [
        {"type": "system", "subtype": "init", "session_id": "s1", "model": "m", "cwd": "/", "tools": []},
        {
            "type": "assistant",
            "message": {"id": "a", "role": "assistant", "content": [{"type": "text", "text": "one"}]},
        },
        {
            "type": "assistant",
            "message": {"id": "b", "role": "assistant", "content": [{"type": "text", "text": "two"}]},
        },
        {"type": "result", "subtype": "success", "is_error": False, "result": "two", "session_id": "s1"},
    ]
    for i, line in enumerate(lines):
        log.chunk("stdout", json_line(line), float(i + 1))
    log.close()
    return tmp_path / "raw.jsonl"


def replayed(path: Path) -> list[tuple[str, str | None]]:
    normalizer = ClaudeCodeExecutor().create_normalizer()
    list(replay(path, normalizer))
    return [
        (e.type.kind, e.type.error.code if isinstance(e.type, ErrorEntry) else e.content)
        for e in normalizer.entries
    ]


def test_replay_reports_a_damaged_line_in_the_middle_and_goes_on(tmp_path: Path) -> None:
    path = make_log(tmp_path)
    clean = replayed(path)
    assert ("assistant_message", "two") in clean
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], b'{"type": "chunk", "ts": 1, "str\xffeam\n', *lines[3:]]))
    got = replayed(path)
    assert got == [("error", DAMAGED) if e == ("assistant_message", "one") else e for e in clean]


def test_replay_reports_a_truncated_last_line(tmp_path: Path) -> None:
    path = make_log(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 25])  # a crash in the middle of the last record
    normalizer = ClaudeCodeExecutor().create_normalizer()
    list(replay(path, normalizer))
    errors = [e for e in normalizer.entries if isinstance(e.type, ErrorEntry)]
    assert [e.type.error.code for e in errors] == [DAMAGED]
    assert "raw.jsonl:5 is cut short" in errors[0].content
    assert [e.content for e in normalizer.entries if e.type.kind == "assistant_message"] == ["one", "two"]


def test_replay_of_a_log_whose_header_is_damaged_is_still_a_log(tmp_path: Path) -> None:
    path = make_log(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0].replace(b'"version":1', b'"version":') + b"".join(lines[1:]))
    got = replayed(path)
    assert got[0] == ("error", DAMAGED) and ("assistant_message", "two") in got


def test_orchestrate_replay_goes_on_after_a_truncated_line(tmp_path: Path) -> None:
    path = make_log(tmp_path)
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], lines[2][:40] + b"\n", *lines[3:]]))
    done = subprocess.run(
        [sys.executable, "-m", "orchestrate", "replay", str(path), "-e", "claude-code", "--output", "jsonl"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "1 line(s) could not be read" in done.stderr
    entries = {p["index"]: p["entry"] for p in map(orjson.loads, done.stdout.splitlines())}
    contents = [e["content"] for e in entries.values()]
    assert "two" in contents and any("raw.jsonl:3" in c for c in contents)


# --- whole runs ---------------------------------------------------------------------------------

# A stream-json agent that runs `env` and reports what it saw: an assistant message written in many
# small pieces (so secrets cross chunk boundaries), the same on stderr, and a result.
ENV_AGENT = r"""
import json, os, sys, time
def emit(obj, pieces=1):
    data = (json.dumps(obj) + "\n").encode()
    step = max(1, len(data) // pieces)
    for i in range(0, len(data), step):
        sys.stdout.buffer.write(data[i:i + step]); sys.stdout.buffer.flush()
        if pieces > 1:
            time.sleep(0.001)
for raw in sys.stdin.buffer:
    msg = json.loads(raw)
    if msg.get("type") == "control_request":
        emit({"type": "control_response", "response": {"subtype": "success",
              "request_id": msg["request_id"], "response": {"commands": []}}})
    elif msg.get("type") == "user":
        emit({"type": "system", "subtype": "init", "session_id": "s1", "model": "fake",
              "cwd": os.getcwd(), "tools": ["Bash"], "permissionMode": "default"})
        time.sleep(float(os.environ.get("FAKE_PAUSE", "0")))
        env = os.environ["FAKE_ENV_OUTPUT"]
        text = "ran env:\n" + env + "\nthe password is " + os.environ["FAKE_DB_PASSWORD"] + "."
        text += "\n" + "padding " * int(os.environ.get("FAKE_PADDING", "0"))
        emit({"type": "assistant", "message": {"id": "m1", "type": "message", "role": "assistant",
              "model": "fake", "content": [{"type": "text", "text": text}], "usage": {}},
              "session_id": "s1", "parent_tool_use_id": None}, pieces=40)
        sys.stderr.write(env + "\n"); sys.stderr.flush()
        emit({"type": "result", "subtype": "success", "is_error": False, "result": "done",
              "session_id": "s1", "num_turns": 1, "duration_ms": 1, "total_cost_usd": 0.0})
"""
ENV_OUTPUT = "\n".join(
    [
        "HOME=/home/dev",
        f"ANTHROPIC_API_KEY={FAKE_KEYS['anthropic']}",
        f"GITHUB_TOKEN={FAKE_KEYS['github classic']}",
        f"AWS_ACCESS_KEY_ID={FAKE_KEYS['aws']}",
        "SERVICE_PASSWORD=not-a-known-format-42",
        "LANG=C.UTF-8",
    ]
)
DB_PASSWORD = "correct-horse-battery-staple"
SECRETS = (*FAKE_KEYS.values(), "not-a-known-format-42", DB_PASSWORD)


def env_agent(tmp_path: Path) -> ClaudeCodeExecutor:
    script = tmp_path / "env_agent.py"
    script.write_text(ENV_AGENT)
    return ClaudeCodeExecutor(ExecutorOptions(base_command=[sys.executable, str(script)]))


async def run_env_agent(tmp_path: Path, **task: Any) -> tuple[RunResult, Run]:
    env = {"FAKE_ENV_OUTPUT": ENV_OUTPUT, "FAKE_DB_PASSWORD": DB_PASSWORD, **task.pop("env", {})}
    run = Run(env_agent(tmp_path), Task(prompt="run env", cwd=tmp_path, env=env, **task), shutdown=FAST)
    async with run:
        result = await run.wait()
    return result, run


def streams(log: Path) -> tuple[bytes, bytes]:
    """What the agent wrote to stdout and to stderr, as the log recorded it (chunks joined)."""
    records = list(read_raw_log(log)[1])
    return tuple(b"".join(r.data for r in records if r.stream == s) for s in ("stdout", "stderr"))  # type: ignore[return-value]


def final_text(result: RunResult) -> str:
    return "\n".join(e.content for e in result.entries if e.type.kind == "assistant_message")


async def test_a_run_that_prints_env_keeps_the_keys_out_of_its_private_log(tmp_path: Path) -> None:
    result, _ = await run_env_agent(tmp_path)
    assert result.outcome == "success" and result.raw_log is not None
    # The caller sees what the agent printed; only what goes to disk is redacted.
    assert FAKE_KEYS["anthropic"] in final_text(result) and DB_PASSWORD in final_text(result)
    raw = result.raw_log.read_bytes()
    stdout, stderr = streams(result.raw_log)
    assert no_secret(raw, *SECRETS) and no_secret(stdout, *SECRETS) and no_secret(stderr, *SECRETS)
    assert stdout.count(MARK) == 5 and stderr.count(MARK) == 4  # each secret, where it was
    assert stat.S_IMODE(result.raw_log.stat().st_mode) == 0o600
    assert stat.S_IMODE(result.raw_log.parent.stat().st_mode) == 0o700  # the default runs dir
    # The log still replays: the same entries, with the secrets replaced.
    normalizer = ClaudeCodeExecutor().create_normalizer()
    list(replay(result.raw_log, normalizer))
    assert [e.type.kind for e in normalizer.entries] == [e.type.kind for e in result.entries]
    replayed_text = "\n".join(e.content for e in normalizer.entries if e.type.kind == "assistant_message")
    assert "the password is [REDACTED]." in replayed_text and "HOME=/home/dev" in replayed_text
    assert "ANTHROPIC_API_KEY=[REDACTED]" in replayed_text


@pytest.mark.parametrize("switch", ["task", "environment"])
async def test_redaction_can_be_turned_off_for_debugging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    if switch == "environment":
        monkeypatch.setenv("ORCHESTRATE_REDACT", "0")
        result, _ = await run_env_agent(tmp_path)
    else:
        result, _ = await run_env_agent(tmp_path, redact_raw_log=False)
    assert result.raw_log is not None
    stdout, stderr = streams(result.raw_log)
    assert MARK not in result.raw_log.read_bytes()
    assert DB_PASSWORD.encode() in stdout and FAKE_KEYS["aws"].encode() in stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
async def test_a_log_on_a_full_device_is_an_error_entry_and_the_run_completes(tmp_path: Path) -> None:
    healthy, _ = await run_env_agent(tmp_path)
    result, _ = await run_env_agent(tmp_path, raw_log=Path("/dev/full"))
    assert result.outcome == "success" and result.cli_exit_code == 0
    errors = [e for e in result.entries if isinstance(e.type, ErrorEntry)]
    assert [e.type.error.code for e in errors] == [RAW_LOG_FAILED]
    assert "/dev/full could not be written (No space left on device)" in errors[0].content
    others = [(e.type.kind, e.content) for e in result.entries if not isinstance(e.type, ErrorEntry)]
    assert others == [(e.type.kind, e.content) for e in healthy.entries]


async def test_a_log_that_cannot_be_opened_leaves_the_run_running(tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_text("")
    result, _ = await run_env_agent(tmp_path, raw_log=tmp_path / "not-a-dir" / "run.jsonl")
    assert result.outcome == "success" and result.raw_log is None
    assert [e.type.error.code for e in result.entries if isinstance(e.type, ErrorEntry)] == [RAW_LOG_FAILED]
    assert DB_PASSWORD in final_text(result)


def test_the_cli_survives_a_file_size_limit_hit_mid_run(tmp_path: Path) -> None:
    # RLIMIT_FSIZE makes the log's writes fail (EFBIG) part way; Python ignores SIGXFSZ.
    limit = 4096
    script = tmp_path / "env_agent.py"
    script.write_text(ENV_AGENT)
    env = {
        **os.environ,
        "FAKE_ENV_OUTPUT": ENV_OUTPUT,
        "FAKE_DB_PASSWORD": DB_PASSWORD,
        "FAKE_PADDING": "2000",
    }
    log = tmp_path / "logs" / "run.jsonl"
    done = subprocess.run(
        [
            sys.executable, "-m", "orchestrate", "run", "-e", "claude-code",
            "--base-command", f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}",
            "--approvals", "deny", "--cwd", str(tmp_path), "--record", str(log),
            "--output", "jsonl", "run env",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = map(orjson.loads, done.stdout.splitlines())
    entries = {p["index"]: p["entry"] for p in lines if "op" in p}  # not the result line
    errors = [e for e in entries.values() if e["type"]["kind"] == "error"]
    assert [e["type"]["error"]["code"] for e in errors] == [RAW_LOG_FAILED]
    assert "File too large" in errors[0]["content"]
    answer = next(e["content"] for e in entries.values() if e["type"]["kind"] == "assistant_message")
    assert answer.endswith("padding " * 2000)  # the whole answer reached the caller
    assert 0 < log.stat().st_size <= limit
    assert no_secret(log.read_bytes(), *SECRETS)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 kB tmpfs: a real full disk (needs root and a machine that lets us mount)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


async def test_a_disk_that_fills_up_mid_run_is_an_error_entry_and_the_run_completes(tiny_disk: Path) -> None:
    log = tiny_disk / "runs" / "run.jsonl"
    result, _ = await run_env_agent(tiny_disk.parent, raw_log=log, env={"FAKE_PADDING": "20000"})
    assert result.outcome == "success" and result.cli_exit_code == 0
    errors = [e for e in result.entries if isinstance(e.type, ErrorEntry)]
    assert [e.type.error.code for e in errors] == [RAW_LOG_FAILED]
    assert "No space left on device" in errors[0].content
    assert final_text(result).endswith("padding " * 20000)  # the caller lost nothing
    assert 0 < log.stat().st_size <= 64 * 1024
    assert stat.S_IMODE((tiny_disk / "runs").stat().st_mode) == 0o700


async def test_records_reach_the_disk_while_the_agent_is_quiet_and_at_a_turns_end(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"

    async def on_disk(needle: bytes, within: float) -> None:
        with anyio.fail_after(within):
            while needle not in log.read_bytes():  # noqa: ASYNC110 - a file has no event to wait on
                await anyio.sleep(0.05)

    async def during(run: Run) -> None:
        await wait_for(run, lambda e: e.type.kind == "system_message")
        # The agent is silent for 3 s after its first line: the batch reaches the disk before that.
        await on_disk(rb"subtype\": \"init", within=2)
        await wait_for(run, lambda e: e.type.kind == "token_usage")
        await on_disk(rb"type\": \"result", within=0.01)  # written at the turn's end, not later
        await run.end_input()

    task = Task(
        prompt="run env",
        cwd=tmp_path,
        env={"FAKE_ENV_OUTPUT": ENV_OUTPUT, "FAKE_DB_PASSWORD": DB_PASSWORD, "FAKE_PAUSE": "3"},
        raw_log=log,
        keep_open=True,
    )
    run = Run(env_agent(tmp_path), task, shutdown=FAST)
    with anyio.fail_after(30):
        async with run:
            await during(run)
            result = await run.wait()
    assert result.outcome == "success"


# --- no secret on the command line ----------------------------------------------------------------


def test_codex_mcp_secrets_go_through_the_environment_not_argv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrate.executors.codex import CodexExecExecutor, CodexExecutor

    monkeypatch.setenv("CLASHING_TOKEN", "the-callers-own-value")
    servers = {
        "github": {
            "command": "github-mcp",
            "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": FAKE_KEYS["github classic"], "LOG_LEVEL": "debug"},
        },
        "other": {
            "command": "other-mcp",
            "env": {"CLASHING_TOKEN": "a-different-value-1", "API_KEY": "k" * 12},
        },
        "twin": {"command": "twin-mcp", "env": {"API_KEY": "another-value-2"}},
    }
    options = ExecutorOptions(base_command="codex", mcp_servers=servers)
    for executor in (CodexExecutor(options), CodexExecExecutor(options)):
        spec = executor.process_spec(Task(prompt="p", cwd=tmp_path))
        argv = " ".join(spec.argv)
        assert FAKE_KEYS["github classic"] not in argv and "k" * 12 not in argv
        assert spec.env["GITHUB_PERSONAL_ACCESS_TOKEN"] == FAKE_KEYS["github classic"]
        assert spec.env["API_KEY"] == "k" * 12
        assert 'mcp_servers.github.env_vars=["GITHUB_PERSONAL_ACCESS_TOKEN"]' in spec.argv
        assert 'mcp_servers.github.env.LOG_LEVEL="debug"' in spec.argv  # not a secret: left as it was
        # A name the caller's environment (or another server) sets otherwise cannot be forwarded.
        assert 'mcp_servers.other.env.CLASHING_TOKEN="a-different-value-1"' in spec.argv
        assert spec.env["CLASHING_TOKEN"] == "the-callers-own-value"
        assert 'mcp_servers.twin.env.API_KEY="another-value-2"' in spec.argv


# An MCP server that writes down the token it was started with, then answers just enough MCP.
MCP_SERVER = r"""
import json, os, sys
with open(sys.argv[1], "w") as f:
    f.write(os.environ.get("FAKE_MCP_TOKEN", "<unset>"))
for raw in sys.stdin:
    msg = json.loads(raw)
    if "id" not in msg:
        continue
    result = {}
    if msg.get("method") == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "fake", "version": "0"}}
    elif msg.get("method") == "tools/list":
        result = {"tools": []}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


@pytest.mark.real_cli
@needs_cli("codex")
async def test_real_codex_forwards_an_mcp_secret_it_never_saw_on_its_command_line(tmp_path: Path) -> None:
    from orchestrate.executors.codex import CodexExecutor
    from orchestrate.testing import Scenario, ScriptedModelServer
    from orchestrate.testing.offline import Scratch, codex_offline_env

    server_script, seen = tmp_path / "mcp_server.py", tmp_path / "seen-token"
    server_script.write_text(MCP_SERVER)
    token = FAKE_KEYS["github classic"]
    mcp = {
        "fake": {
            "command": sys.executable,
            "args": [str(server_script), str(seen)],
            "env": {"FAKE_MCP_TOKEN": token},
        }
    }
    executor = CodexExecutor(ExecutorOptions(base_command=[str(CLI_BIN / "codex")], mcp_servers=mcp))
    steps = [{"text": "Hello from the scripted model."}]
    with Scratch.create() as scratch, ScriptedModelServer(Scenario.from_obj({"steps": steps})) as model:
        task = Task(prompt="hi", cwd=scratch.work, env=codex_offline_env(model, scratch), timeout=90)
        with anyio.fail_after(120):
            async with Run(executor, task, AutoDeny()) as run:
                result = await run.wait()
    assert result.outcome == "success", result.error
    assert all(token not in arg for arg in run._spec.argv)
    assert seen.read_text() == token  # the server got it all the same
    assert result.raw_log is not None and token.encode() not in result.raw_log.read_bytes()
