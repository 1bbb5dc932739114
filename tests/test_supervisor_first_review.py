"""Review of the supervisor spawned first (process/prestart.py's standby, cli/early.py): attacks on
its message, its deadline and the agent it starts, with real processes.  Every would-be agent here
creates a marker file when it runs: its absence proves nothing was started."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from orchestrate.process import supervisor

from .test_supervisor_first import Spawned, answer, spawned, started_nothing, supervise

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux supervisor")

__all__ = ["spawned"]  # the fixture, imported for the tests below


def _body(*fields: bytes) -> bytes:
    body = b"\0".join(fields)
    return supervisor.MAGIC + len(body).to_bytes(4, "big") + body


def _touch(marker: Path) -> bytes:
    return b"touch " + bytes(marker) + b"; exec sleep 30"


# A count is ASCII digits; one too long for int() (over 4300 digits) raised ValueError in the
# supervisor: a traceback on the agent's stderr and exit 1, not the 125 of a refused message.
LONG_COUNTS = {
    "arguments": lambda m: _body(b"", b"", b"0" * 4999 + b"3", b"-", b"/bin/sh", b"-c", _touch(m)),
    "entries": lambda m: _body(b"", b"", b"3", b"0" * 4999 + b"1", b"/bin/sh", b"-c", _touch(m), b"A=1"),
}


@pytest.mark.parametrize("count", sorted(LONG_COUNTS))
def test_a_count_too_long_for_int_is_refused_like_any_bad_message(
    tmp_path: Path, spawned: Spawned, count: str
) -> None:
    marker = tmp_path / "started"
    proc, ours = supervise(spawned)
    ours.sendall(LONG_COUNTS[count](marker))
    started_nothing(proc, ours, marker)


def test_a_short_count_with_leading_zeros_still_starts(tmp_path: Path, spawned: Spawned) -> None:
    """The control: the same message with a count of a few digits is heard."""
    marker = tmp_path / "started"
    proc, ours = supervise(spawned)
    ours.sendall(_body(b"", b"", b"003", b"-", b"/bin/sh", b"-c", _touch(marker)))
    assert answer(ours).startswith(b"ok ")
    deadline = time.monotonic() + 10
    while not marker.exists():
        assert time.monotonic() < deadline, "the agent never ran"
        time.sleep(0.01)
    ours.sendall(b"kill\n")
    assert proc.wait(10) != supervisor.NOTHING_STARTED
