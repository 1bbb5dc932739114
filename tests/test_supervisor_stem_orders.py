"""The agent's process before its exec (supervisor.py's ``_Stem``) is sent its orders (the message's
body) over a pipe, after the supervisor has read and checked them.  A body larger than the pipe
(64 KiB: a big environment) goes in several writes, and a supervisor SIGKILLed between two of them
leaves the stem a truncated body followed by end of file: ``PR_SET_PDEATHSIG`` kills the stem
within microseconds, but that is a race.  So the orders are self-delimiting and checked by the stem
itself: a truncated body, or one followed by any byte, is never executed (the would-be agent's
marker file stays absent) and the stem exits non-zero.

Simulated here without the race: what the supervisor's ``_Stem.go`` sends is captured whole, then
only part of it (or more) is written to a real stem and its pipe closed."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrate.process import supervisor

from .helpers import python_json

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux supervisor")

# In a fresh python of one thread (the stem is a fork of it): for each cut (argv[2]: JSON list of
# [name, how many bytes of the orders to write, bytes to add after them]), a stem is made, given that
# much of its orders and the pipe closed; prints {name: [exit code, report pipe's content]}.
HARNESS = r"""
import json, os, sys, time
from orchestrate.process import supervisor

tmp = sys.argv[1]
marker = os.path.join(tmp, "started")
# The would-be agent touches its marker; the padding (a comment) is what a cut near the end
# truncates, leaving a command that still parses and runs.
script = f"touch {marker} #" + "x" * 200
body = supervisor.encode(["/bin/sh", "-c", script], None, None, None)[supervisor._HEADER :]
out = {}


def orders(stem):
    # What go() sends, captured whole: its pipe swapped for ours for the call.
    read, write = os.pipe()
    real, stem._orders = stem._orders, write
    stem.go(body)  # closes `write`
    sent = b""
    while chunk := os.read(read, 1 << 16):
        sent += chunk
    os.close(read)
    return real, sent


for name, cut, extra, *how in json.loads(sys.argv[2]):
    report_read, report_write = os.pipe()
    stem = supervisor._Stem(None, report_write, early=False)
    os.close(report_write)
    real, sent = orders(stem)
    if cut <= 0:  # from the end (0: the whole)
        cut += len(sent)
    data = sent[:cut] + bytes.fromhex(extra)
    if how == ["raw"]:  # `extra` alone: a length of our own
        data = bytes.fromhex(extra) + (sent[4:] if cut else b"")
    if how == ["trickle"]:  # a byte at a time, the stem reading each as it comes
        for i in range(len(data)):
            os.write(real, data[i : i + 1])
            time.sleep(0.001)
    else:
        os.write(real, data)
    os.close(real)  # as a supervisor killed mid-send: end of file
    deadline = time.monotonic() + 10
    while True:
        pid, status = os.waitpid(stem.pid, os.WNOHANG)
        if pid:
            break
        assert time.monotonic() < deadline, f"{name}: the stem did not end"
        time.sleep(0.005)
    told = b""
    while chunk := os.read(report_read, 64):
        told += chunk
    os.close(report_read)
    out[name] = [os.waitstatus_to_exitcode(status), told.decode()]
print(json.dumps(out), flush=True)
"""


def stems(tmp_path: Path, cuts: list[tuple[str, int, str] | tuple[str, int, str, str]]) -> dict[str, Any]:
    # (stdin not the terminal: the stem takes the terminal's foreground when stdin is one)
    got, _ = python_json(HARNESS, str(tmp_path), json.dumps(cuts), stdin=subprocess.DEVNULL)
    return got


CUTS: list[tuple[str, int, str] | tuple[str, int, str, str]] = [
    ("one byte short", -1, ""),
    ("the padding cut", -100, ""),
    ("inside the padding", 150, ""),
    ("inside the marker's name", -205, ""),  # `touch .../star`: another file, and exit 0
    ("one byte", 1, ""),
    ("a byte more", 0, "00"),
    ("another field more", 0, "0041"),
    ("a byte more, a byte at a time", 0, "00", "trickle"),
    ("one byte short, a byte at a time", -1, "", "trickle"),
    ("the length's high bit set", 1, "80000000", "raw"),  # (1: the body after it)
    ("a length of 0, then the body", 1, "00000000", "raw"),
    ("the largest length", 1, "ffffffff", "raw"),
    ("a length alone", 0, "00000010", "raw"),
]


def test_truncated_or_extended_orders_are_never_executed(tmp_path: Path) -> None:
    got = stems(tmp_path, CUTS)
    assert not (tmp_path / "started").exists(), got
    for name, (code, told) in got.items():
        # Refused, and said so to its supervisor (which then answers "err", not "ok")
        assert (code, told) == (supervisor.NOTHING_STARTED, f"e{errno.EBADMSG}"), (name, got)


def test_whole_orders_are_executed(tmp_path: Path) -> None:
    """The control: the same orders, whole, run the agent (its marker appears, it exits 0); and
    none at all (end of file at once: the supervisor is ending it unstarted) start nothing."""
    got = stems(tmp_path, [("whole", 0, "")])
    assert got["whole"][0] == 0 and (tmp_path / "started").exists()
    (tmp_path / "started").unlink()
    got = stems(tmp_path, [("whole, a byte at a time", 0, "", "trickle")])
    assert got["whole, a byte at a time"][0] == 0 and (tmp_path / "started").exists()
    (tmp_path / "started").unlink()
    empty = stems(tmp_path, [("a length of 0 alone", 0, "00000000", "raw")])
    assert empty["a length of 0 alone"][0] in (0, supervisor.NOTHING_STARTED)  # nothing started
    assert not (tmp_path / "started").exists()
    empty = stems(tmp_path, [("nothing", -(1 << 30), "")])
    assert not (tmp_path / "started").exists()
    assert empty["nothing"][1] == ""  # no error reported: it was told nothing, and obeyed
