"""A forked supervisor renames itself (supervisor.py's ``_rename``): ``/proc/self/comm``, and its
command line by writing its ``argv`` memory through ``/proc/self/mem`` at ``arg_start`` of
``/proc/self/stat``.  A write through ``/proc/self/mem`` ignores the memory's protections, so it must
land on our ``argv`` strings and nowhere else, whatever ``/proc/self/stat`` says (an emulated /proc,
a process whose ``PR_SET_MM`` moved its arguments, a name holding ``) ``), and no failure of /proc
may crash the supervisor: its agent is running by then, and dies with it.

Each case runs in a python of its own (it renames the process that calls it), started through a
symlink whose name holds spaces and parentheses, as an attacker may name the executable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrate.process import supervisor

from .helpers import ROOT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux /proc")

# argv[1]: the case.  Prints a JSON object of what it saw.
HARNESS = r"""
import ctypes, json, os, sys
from orchestrate.process import supervisor

case = sys.argv[1]
out = {}
real_open = os.open


def fake_stat(start, end):
    # /proc/self/stat as read now, its arg_start and arg_end (fields 48 and 49) replaced.
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    head, _, tail = stat.rpartition(b") ")
    fields = tail.split()
    fields[48 - 3], fields[49 - 3] = b"%d" % start, b"%d" % end
    path = os.path.join(os.environ["R21_TMP"], "stat")
    with open(path, "wb") as f:
        f.write(head + b") " + b" ".join(fields) + b"\n")

    def opener(name, flags, *args, **kwargs):
        return real_open(path if name == "/proc/self/stat" else name, flags, *args, **kwargs)

    os.open = opener


def read(name):
    with open(name, "rb") as f:
        return f.read()


environ = read("/proc/self/environ")
out["comm before"] = read("/proc/self/comm").decode()
if case == "plain":
    pass
elif case == "heap":  # arg_start..arg_end said to be a buffer of ours: it must not be written
    victim = bytearray(b"V" * 200)
    address = ctypes.addressof(ctypes.c_char.from_buffer(victim))
    fake_stat(address, address + len(victim))
elif case == "huge":  # an absurd range: nothing allocated for it, nothing raised
    with open("/proc/self/stat", "rb") as f:
        start = int(f.read().rpartition(b") ")[2].split()[48 - 3])
    fake_stat(start, start + (1 << 46))
elif case == "reversed":
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rpartition(b") ")[2].split()
    fake_stat(int(fields[49 - 3]), int(fields[48 - 3]))
elif case == "no comm":  # the name cannot be written: /proc/self/stat is read with ours in it

    def opener(name, flags, *args, **kwargs):
        if name == "/proc/self/comm" and flags & os.O_WRONLY:
            raise PermissionError(13, "denied", name)
        return real_open(name, flags, *args, **kwargs)

    os.open = opener
elif case == "no mem":  # /proc/self/mem refused (a seccomp profile, a hardened /proc)

    def opener(name, flags, *args, **kwargs):
        if name in ("/proc/self/mem", "/proc/self/comm"):
            raise PermissionError(13, "denied", name)
        return real_open(name, flags, *args, **kwargs)

    os.open = opener
try:
    supervisor._rename()
except BaseException as exc:
    out["raised"] = repr(exc)
os.open = real_open
out["cmdline"] = read("/proc/self/cmdline").decode(errors="replace")
out["comm"] = read("/proc/self/comm").decode()
out["environ kept"] = read("/proc/self/environ") == environ
out["os.environ kept"] = os.environ.get("R21_CANARY") == "canary"
if case == "heap":
    out["victim kept"] = bytes(victim) == b"V" * 200
print(json.dumps(out))
"""

NAME = "py) R 1 2 (x"  # what /proc/self/stat's second field then holds: spaces and ")"


def run(case: str, tmp_path: Path, script: str | None = None) -> dict[str, Any]:
    link = tmp_path / NAME
    link.symlink_to(sys.executable)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "R21_TMP": str(tmp_path), "R21_CANARY": "canary"}
    # A script: by relative names, so that the arguments are short.
    argv = [str(link), "-c", HARNESS, case] if script is None else [f"./{NAME}", script, case]
    proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    got: dict[str, Any] = json.loads(proc.stdout)
    assert got["comm before"].startswith("py) R 1 2 (x")  # the control: the name is the link's
    assert "raised" not in got, got["raised"]
    assert got["environ kept"] and got["os.environ kept"]
    return got


def test_a_name_with_parentheses_and_spaces_is_renamed(tmp_path: Path) -> None:
    got = run("plain", tmp_path)
    assert got["comm"] == supervisor.NAME.decode() + "\n"
    assert got["cmdline"] == supervisor.TITLE.decode() + "\0"


def test_the_command_line_is_found_though_the_name_holds_parentheses(tmp_path: Path) -> None:
    """Not renamed (comm refused), /proc/self/stat's name field is the link's, ``) `` and all."""
    got = run("no comm", tmp_path)
    assert got["comm"] == NAME + "\n"
    assert got["cmdline"] == supervisor.TITLE.decode() + "\0"


def test_an_argv_area_smaller_than_the_title_is_left_as_it_is(tmp_path: Path) -> None:
    """``NAME x`` (a short script name): its command line stays, its environment is not touched."""
    (tmp_path / "x").write_text(HARNESS)
    got = run("plain", tmp_path, script="x")
    assert got["comm"] == supervisor.NAME.decode() + "\n"
    assert got["cmdline"] == f"./{NAME}\0x\0plain\0"
    assert len(got["cmdline"]) < len(supervisor.TITLE) + 2  # the control: too small indeed


def test_memory_that_is_not_our_argv_is_never_written(tmp_path: Path) -> None:
    """/proc/self/stat naming other memory (an emulated /proc, arguments moved by PR_SET_MM): the
    write through /proc/self/mem would land there, ignoring its protections."""
    got = run("heap", tmp_path)
    assert got["victim kept"]


@pytest.mark.parametrize("case", ["huge", "reversed", "no mem"])
def test_a_proc_that_refuses_or_lies_neither_crashes_nor_renames(tmp_path: Path, case: str) -> None:
    got = run(case, tmp_path)
    assert got["cmdline"].endswith(f"\0{case}\0")  # as it was
