"""The policy against real bash: generated command lines run under bash, with every program a stub
that records the arguments it really got.  Whatever the parser thinks, the truth is what ran:

* under full autonomy, a line that really ran ``rm`` with -r and -f, or ``sudo``, was never approved;
* under the README's rules, a line approved really ran only ``git status…`` and ``pytest…``, and
  wrote no file.

Nothing destructive can run: every program found by PATH is a stub or a wrapper that only finds
stubs, and generated lines name programs by bare name only."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrate.approvals import ApprovalDecision, ApprovalPipeline, ApprovalRequest, RulePolicy

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")

STUBS = ("rm", "sudo", "git", "pytest", "curl", "ls", "cat")
WRAPPERS = ("env", "timeout", "nice", "nohup", "xargs", "stdbuf", "bash", "sh", "setsid")
# Each stub writes its name and arguments, unit-separated, then a record separator.
STUB = '#!/bin/sh\nprintf \'%s\\037\' "${0##*/}" "$@" >> "$STUB_LOG"\nprintf \'\\036\' >> "$STUB_LOG"\n'

DENY = {"commands": ["rm -rf*", "sudo *"], "paths": ["**/.env", "/etc/**"]}
README = {"allow": {"commands": ["git status*", "pytest*"]}, "deny": DENY}
FULL = {"autonomy": "full", "deny": DENY}


@pytest.fixture(scope="module")
def stub_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bin_dir = tmp_path_factory.mktemp("bin")
    for name in STUBS:
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(0o755)
    for name in WRAPPERS:
        real = shutil.which(name)
        if real is not None:
            (bin_dir / name).symlink_to(real)
    return bin_dir


def really_ran(line: str, bin_dir: Path, cwd: Path) -> list[list[str]]:
    log = cwd / ".stub.log"
    env = {"PATH": str(bin_dir), "STUB_LOG": str(log), "HOME": str(cwd), "LC_ALL": "C"}
    assert BASH is not None
    subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", line],
        cwd=cwd,
        env=env,
        input=b"a b\n",
        capture_output=True,
        timeout=10,
        check=False,
    )
    if not log.exists():
        return []
    records = log.read_bytes().decode("utf-8", "replace").split("\x1e")
    log.unlink()
    return [r.split("\x1f")[:-1] for r in records if r]


def recursive_force(argv: list[str]) -> bool:
    """rm with -r (or -R, --recursive) and -f (--force), as rm itself reads them."""
    letters: set[str] = set()
    for arg in argv[1:]:
        if arg == "--":
            break
        if arg.startswith("--"):
            letters |= {"r"} if "--recursive".startswith(arg) and len(arg) > 3 else set()
            letters |= {"f"} if "--force".startswith(arg) and len(arg) > 3 else set()
        elif arg.startswith("-"):
            letters |= {c.lower() if c == "R" else c for c in arg[1:]}
    return argv[0] == "rm" and {"r", "f"} <= letters


def decide(raw: dict[str, object], line: str, cwd: Path) -> ApprovalDecision:
    pipeline = ApprovalPipeline(RulePolicy.from_dict(raw))
    request = ApprovalRequest(request_id="r", tool_name="Bash", command=line, cwd=str(cwd))
    return anyio.run(pipeline.request_approval, request)


# --- generating lines -------------------------------------------------------------------------

SIMPLE = [
    ["git", "status"],
    ["git", "status", "--short"],
    ["git", "log"],
    ["pytest", "-q"],
    ["rm", "-rf", "x"],
    ["rm", "-r", "-f", "x"],
    ["rm", "-fR", "x"],
    ["rm", "--recursive", "--force", "x"],
    ["rm", "x"],
    ["rm", "-f", "x"],
    ["sudo", "id"],
    ["curl", "-s", "u"],
    ["ls", "-la"],
    ["echo", "rm -rf x"],
]


def spell(word: str, how: int) -> str:
    """One word, spelled as bash would still read it."""
    if how == 1:
        return "\\" + word
    if how == 2:
        return f'"{word}"'
    if how == 3:
        return f"'{word}'"
    if how == 4 and len(word) > 1:
        return word[0] + '""' + word[1:]
    if how == 5:
        return "$'" + "".join(f"\\x{ord(c):02x}" for c in word) + "'"
    if how == 6 and len(word) > 1:
        return word[0] + "\\\n" + word[1:]  # a line continuation inside the word
    return word


@st.composite
def simple_commands(draw: st.DrawFn) -> str:
    argv = draw(st.sampled_from(SIMPLE))
    words = [spell(w, draw(st.integers(0, 6))) if " " not in w else f"'{w}'" for w in argv]
    line = " ".join(words)
    wrapper = draw(st.integers(0, 9))
    return [
        line,
        f"timeout 5 {line}",
        f"nice -n 1 {line}",
        f"env FOO=1 {line}",
        f"command {line}",
        f"nohup {line} 2>/dev/null",
        f"bash -c {shell_quote(line)}",
        f"sh -c {shell_quote(line)}",
        f"eval {shell_quote(line)}",
        f"echo x | xargs {line}",
    ][wrapper]


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@st.composite
def lines(draw: st.DrawFn) -> str:
    parts = draw(st.lists(simple_commands(), min_size=1, max_size=3))
    out = parts[0]
    for part in parts[1:]:
        op = draw(st.sampled_from(["; ", " && ", " || ", " | ", " & ", "\n", " ;\n"]))
        nest = draw(st.integers(0, 4))
        part = [part, f"( {part} )", f"{{ {part}; }}", f"echo $( {part} )", f"echo `{part}`"][nest]
        out += op + part
    if draw(st.booleans()):
        out += draw(st.sampled_from([" > out.txt", " 2>&1", " >/dev/null", " >> .env", ""]))
    return out


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(line=lines())
def test_what_really_ran_decides(line: str, stub_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    cwd = tmp_path_factory.mktemp("cwd")
    ran = really_ran(line, stub_bin, cwd)
    written = {p.name for p in cwd.iterdir()}
    full = decide(FULL, line, cwd)
    if any(recursive_force(argv) or argv[0] == "sudo" for argv in ran):
        assert full.status != "approved", (line, ran)
    readme = decide(README, line, cwd)
    if readme.status == "approved":
        for argv in ran:
            assert (argv[0] == "git" and argv[1:2] and argv[1].startswith("status")) or argv[0] == "pytest", (
                line,
                ran,
            )
        assert not written, (line, written)


def test_the_stubs_record_what_bash_really_runs(stub_bin: Path, tmp_path: Path) -> None:
    """The harness itself: a continuation and a quoted name are joined by bash, not by us."""
    assert really_ran("r\\\nm -rf x; 'su'do id; echo x | xargs git status", stub_bin, tmp_path) == [
        ["rm", "-rf", "x"],
        ["sudo", "id"],
        ["git", "status", "x"],
    ]
    assert recursive_force(["rm", "--rec", "-F", "--forc"]) and not recursive_force(["rm", "-r", "--", "-f"])
    assert os.environ.get("STUB_LOG") is None  # never leaks into the test process
