"""Every git command the workspace layer runs goes through :func:`run_git`: the real ``git`` binary,
a fixed environment, and a fixed configuration that no repository can override.

An agent can write anything inside its worktree, and often into the repository's ``.git`` too
(``.git/config``, hooks, ``.gitattributes``).  Git would then run that repository's commands on our
behalf: hooks on checkout and commit, ``core.fsmonitor`` on every index read, filter drivers on add
and checkout, ``gpg.program`` when commits are signed, a pager, an editor, ssh.  So:

- the environment is built from nothing but ``PATH``, ``HOME`` and the locale: no ``GIT_*``
  variable of ours leaks in (``GIT_DIR``, ``GIT_INDEX_FILE``, ``GIT_CONFIG_*`` ...), system and
  global configuration are off, replace refs are ignored;
- the repository's directories are pinned (``GIT_DIR``, ``GIT_WORK_TREE``) by the caller, so neither a
  rewritten ``.git`` file nor ``core.worktree`` can point git elsewhere;
- configuration that runs commands is overridden through ``GIT_CONFIG_COUNT`` (highest priority, and
  unlike ``-c`` exact whatever a key contains): hooks, fsmonitor, pager, editor, ssh, signing, and
  every filter driver the repository defines (found by :func:`neutral_filters`);
- every call has a timeout (the whole process group is killed past it) and bounded output.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import OrchestrateError

__all__ = [
    "GIT_TIMEOUT",
    "SAFE_CONFIG",
    "GitError",
    "GitRepo",
    "git_binary",
    "neutral_filters",
    "run_git",
    "safe_environment",
]

GIT_TIMEOUT = 120.0
"""Seconds any one git command may take (a checkout of a big repository included)."""
MAX_OUTPUT = 256 * 1024 * 1024
"""Bytes of standard output a git command may produce before it is refused (diffs are capped lower)."""
_STDERR_TAIL = 4096

# Configuration that no repository may set for us.  Values that name a command are set to "false"
# (a command that fails) or emptied (no command); the others keep a snapshot byte-exact and whole.
SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),  # every hook looked up under /dev/null: none is found
    ("core.fsmonitor", "false"),
    ("core.fsmonitorHookVersion", "0"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("core.gitProxy", ""),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    ("diff.external", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("gpg.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.x509.program", "false"),
    ("core.useReplaceRefs", "false"),
    ("core.sparseCheckout", "false"),
    ("core.sparseCheckoutCone", "false"),
    ("index.sparse", "false"),
    ("core.autocrlf", "false"),
    # A snapshot must see every change: no stat shortcut the repository could turn on to hide one.
    ("core.ignoreStat", "false"),
    ("core.checkStat", "default"),
    ("core.trustctime", "true"),
    ("core.fileMode", "true"),
    ("core.splitIndex", "false"),
    ("core.safecrlf", "false"),
    ("core.untrackedCache", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("init.templateDir", ""),  # a private repository gets no sample hooks
    ("init.defaultBranch", "main"),
    ("advice.detachedHead", "false"),
)


class GitError(OrchestrateError):
    """A git command failed, timed out, or is not installed; ``stderr`` holds the end of what it said."""

    def __init__(
        self, message: str, *, args: Sequence[str] = (), returncode: int | None = None, stderr: str = ""
    ) -> None:
        self.git_args = list(args)
        self.returncode = returncode
        self.stderr = stderr
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        super().__init__(f"{message}: {detail}" if detail else message)


@dataclass(frozen=True)
class GitRepo:
    """A repository pinned by its directories: ``git_dir`` (for a linked worktree, its own admin
    directory under the main repository's ``.git/worktrees``) and the ``work_tree`` (None: none)."""

    git_dir: Path
    work_tree: Path | None = None


def git_binary() -> str:
    found = shutil.which("git", path=os.environ.get("PATH", os.defpath))
    if found is None:
        raise GitError("git is not installed (no `git` on PATH); workspaces need it")
    return found


def safe_environment(config: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """The whole environment of a git command: a few harmless variables of ours, then git's own."""
    env = {k: v for k in ("PATH", "HOME", "TMPDIR", "XDG_CONFIG_HOME") if (v := os.environ.get(k))}
    env |= {
        "LC_ALL": "C",
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_SYSTEM": os.devnull,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_PAGER": "cat",
        "PAGER": "cat",
        "GIT_EDITOR": "false",
        "GIT_SSH_COMMAND": "false",
        "GIT_ASKPASS": "",
        "SSH_ASKPASS": "",
    }
    pairs = [*SAFE_CONFIG, *config]
    env["GIT_CONFIG_COUNT"] = str(len(pairs))
    for i, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def run_git(
    args: Sequence[str],
    *,
    repo: GitRepo | None = None,
    cwd: Path | None = None,
    index: Path | None = None,
    input: bytes | None = None,
    config: Sequence[tuple[str, str]] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT,
    max_output: int = MAX_OUTPUT,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git ARGS`` (blocking: call it from a worker thread in async code).

    ``repo`` pins the repository; without it git finds one from ``cwd`` (only to discover a
    repository, never to change one).  ``index``: the index file to use instead of the repository's.
    ``config``: more overrides (:func:`neutral_filters`).  ``env``: extra variables (author names).
    Raises :class:`GitError` on a non-zero exit (unless ``check`` is false), past ``timeout``, or when
    the output passes ``max_output`` bytes."""
    full_env = safe_environment(config)
    if repo is not None:
        full_env["GIT_DIR"] = str(repo.git_dir)
        if repo.work_tree is not None:
            full_env["GIT_WORK_TREE"] = str(repo.work_tree)
    if index is not None:
        full_env["GIT_INDEX_FILE"] = str(index)
    if env:
        full_env |= dict(env)
    argv = [git_binary(), "--no-pager", *args]
    run_in = cwd or (repo.work_tree if repo is not None and repo.work_tree is not None else None)
    if run_in is None and repo is not None:
        run_in = repo.git_dir
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as given:
        if input is not None:
            given.write(input)
            given.seek(0)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=given if input is not None else subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=run_in,
                env=full_env,
                start_new_session=True,  # a timeout kills git and anything it started
            )
        except OSError as exc:
            raise GitError(f"could not run git {args[0] if args else ''}: {exc}", args=args) from exc
        try:
            returncode = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise GitError(f"git {' '.join(args[:2])} took longer than {timeout:g} s", args=args) from None
        except BaseException:
            _kill_group(proc)
            raise
        stderr = _tail(err)
        if out.tell() > max_output:
            raise GitError(
                f"git {' '.join(args[:2])} printed more than {max_output} bytes", args=args, stderr=stderr
            )
        out.seek(0)
        stdout = out.read()
    if check and returncode != 0:
        raise GitError(f"git {' '.join(args[:2])} failed", args=args, returncode=returncode, stderr=stderr)
    return subprocess.CompletedProcess(argv, returncode, stdout, stderr.encode())


def neutral_filters(repo: GitRepo) -> list[tuple[str, str]]:
    """Overrides that switch off every filter driver the repository's configuration defines (a
    ``.gitattributes`` may name them for any file): no clean, smudge or process command runs, and
    none is required.  Read just before the command they guard."""
    found = run_git(["config", "-z", "--name-only", "--get-regexp", r"^filter\."], repo=repo, check=False)
    drivers = set()
    for name in found.stdout.split(b"\0"):
        key = name.decode("utf-8", "surrogateescape")
        if key.count(".") >= 2:
            drivers.add(key[len("filter.") : key.rindex(".")])
    overrides = []
    for driver in sorted(drivers):
        for var, value in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")):
            overrides.append((f"filter.{driver}.{var}", value))
    return overrides


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def _tail(f: IO[bytes]) -> str:
    size = f.tell()
    f.seek(max(0, size - _STDERR_TAIL))
    data: bytes = f.read()
    return data.decode("utf-8", "replace")
