"""Attacks on the rule policy: command lines that real bash runs differently from what the rules
were shown.  Each case first proves the attack under real bash (a marker file appears: code ran
that no allow rule names), then that the approval pipeline does not approve it."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest

from orchestrate.approvals import ApprovalPipeline, ApprovalRequest, RulePolicy

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")

DENY = {"commands": ["rm -rf*", "sudo *"], "paths": ["**/.env", "/etc/**"]}
README = {"allow": {"commands": ["git status*", "pytest*"]}, "deny": DENY}
ECHO = {"allow": {"commands": ["git status*", "pytest*", "echo*"]}, "deny": DENY}
FULL = {"autonomy": "full", "deny": DENY}


def decide(policy: dict[str, object], line: str, cwd: Path) -> str:
    pipeline = ApprovalPipeline(RulePolicy.from_dict(policy))
    request = ApprovalRequest(request_id="r", tool_name="Bash", command=line, cwd=str(cwd))
    return anyio.run(pipeline.request_approval, request).status


def runs_marker(line: str, cwd: Path) -> bool:
    """Run ``line`` under real bash with harmless stand-ins for git and pytest: whether the
    ``touch MARK`` hidden in it ran."""
    bin_dir = cwd / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("git", "pytest"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    touch = shutil.which("touch")
    assert BASH is not None and touch is not None
    (bin_dir / "touch").symlink_to(touch)
    (cwd / "MARK").unlink(missing_ok=True)
    subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", line],
        cwd=cwd,
        env={"PATH": str(bin_dir), "HOME": str(cwd)},
        capture_output=True,
        timeout=10,
        check=False,
    )
    return (cwd / "MARK").exists()


# Bash evaluates a variable's value as code in arithmetic (``a[$(cmd)]`` as a subscript runs cmd),
# in prompt expansion (``${x@P}``) and in indirect expansion (``${!x}``).  ``$_``, the previous
# command's last argument, carries the payload with no assignment anywhere in the line.
EVALUATED = [
    (README, "pytest 'a[$(touch MARK)]'; ((_))"),
    (README, "git status 'a[$(touch MARK)]'; [[ $_ -eq 0 ]]"),
    (README, "git status 'a[$(touch MARK)]'; [[ _ -lt 1 ]]"),
    (README, "git status 'a[$(touch MARK)]'; git status $((_))"),
    (README, "git status 'a[$(touch MARK)]'; git status $[_]"),
    (README, "pytest 'a[$(touch MARK)]'; for ((i=_;0;)); do :; done"),
    (README, "pytest 'a[$(touch MARK)]'; pytest ${x[_]}"),
    (README, "pytest 'a[$(touch MARK)]'; pytest \"${PWD:_}\""),
    (README, "pytest 'x'; [[ -v 'a[$(touch MARK)]' ]]"),
    (ECHO, "echo '$(touch MARK)'; echo ${_@P}"),
    (ECHO, "echo 'a[$(touch MARK)]'; echo ${!_}"),
    (ECHO, "[[ '$(touch MARK)' =~ .* ]]; echo ${BASH_REMATCH@P}"),
    (FULL, "git status 'a[$(rm -rf x; touch MARK)]'; ((_))"),
]


@pytest.mark.parametrize(("policy", "line"), EVALUATED, ids=[line for _, line in EVALUATED])
def test_a_value_evaluated_as_code_is_not_approved(
    policy: dict[str, object], line: str, tmp_path: Path
) -> None:
    assert runs_marker(line, tmp_path), "the attack must really run code under bash"
    assert decide(policy, line, tmp_path) != "approved"


@pytest.mark.parametrize(
    "line",
    ["echo $((1 + 2))", "pytest -n $((2*2))", "git status ${x:-a} ${x:1:2} ${a[0]} ${a[@]} ${#a[@]}"],
)
def test_arithmetic_on_numbers_alone_is_still_approved(line: str, tmp_path: Path) -> None:
    assert decide(ECHO, line, tmp_path) == "approved"


# Inside backticks bash unescapes \` before parsing, so an escaped backtick pair is a nested
# command substitution that runs; a parser reading it as words sees only ``echo``.
BACKTICKS = [
    (ECHO, r"echo `echo \`touch MARK\``"),
    (ECHO, r'echo "`echo \`touch MARK\``"'),
    (FULL, r"echo `echo \`rm -rf x; touch MARK\``"),
]


@pytest.mark.parametrize(("policy", "line"), BACKTICKS, ids=[line for _, line in BACKTICKS])
def test_nested_backticks_are_judged_as_bash_reads_them(
    policy: dict[str, object], line: str, tmp_path: Path
) -> None:
    assert runs_marker(line, tmp_path), "the attack must really run code under bash"
    assert decide(policy, line, tmp_path) != "approved"


def test_plain_backticks_are_still_approved(tmp_path: Path) -> None:
    assert decide(ECHO, 'echo `echo a` "`git status`"', tmp_path) == "approved"


# A script handed to sh (dash on Debian) is read by dash, whose grammar is not bash's: it has no
# $'...' quoting, and reads "a &>f b" as "a &" then ">f b".  Each line is one echo to a bash
# grammar and runs touch under dash.
DASH = shutil.which("dash")
SH_SCRIPTS = ["echo $'a\\'; touch MARK; #'", "echo a &>/dev/null touch MARK"]


@pytest.mark.skipif(DASH is None, reason="needs dash")
@pytest.mark.parametrize("script", SH_SCRIPTS)
def test_a_script_for_dash_is_not_judged_as_bash(script: str, tmp_path: Path) -> None:
    line = f"dash -c {shlex.quote(script)}"
    assert runs_marker(line.replace("dash", str(DASH), 1), tmp_path), "the attack must really run under dash"
    assert decide(ECHO, f"echo x; {line}", tmp_path) != "approved"
    assert decide(ECHO, line.replace("dash", "sh", 1), tmp_path) != "approved"
    assert decide(ECHO, f"bash -c {shlex.quote(script)}", tmp_path) == "approved"  # bash reads it as one echo


@pytest.mark.skipif(DASH is None, reason="needs dash")
@pytest.mark.parametrize("script", SH_SCRIPTS)
def test_codex_sh_wrapper_is_not_taken_off_before_judging(script: str, tmp_path: Path) -> None:
    """Codex runs the argv the model asked for; ["/bin/sh", "-c", script] runs dash."""
    from orchestrate import Task
    from orchestrate.executors.codex import CodexExecutor

    argv = [str(DASH), "-c", script]
    assert runs_marker(shlex.join(argv), tmp_path)
    for shell in ("/bin/sh", "sh", "dash"):
        request = CodexExecutor().approval_request(
            "1",
            "item/commandExecution/requestApproval",
            {"command": [shell, "-c", script]},
            {},
            Task(prompt="x", cwd=tmp_path),
            None,
        )
        assert request.command is not None
        decision = anyio.run(ApprovalPipeline(RulePolicy.from_dict(ECHO)).request_approval, request)
        assert decision.status != "approved", (shell, request.command)
    bash = CodexExecutor().approval_request(
        "1",
        "item/commandExecution/requestApproval",
        {"command": ["/bin/bash", "-lc", "git status"]},
        {},
        Task(prompt="x", cwd=tmp_path),
        None,
    )
    assert bash.command == "git status"  # bash is still taken off, as before
