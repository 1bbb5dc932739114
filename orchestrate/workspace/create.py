"""Making a workspace (a git worktree of a repository, or a plain copy of a directory), running its
setup command, finding it again, and removing it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ..task import WorkspaceOptions
from .git import GitError, GitRepo, neutral_filters, run_git
from .model import (
    CHECKPOINT_REFS,
    INFO_FILE,
    NotAGitRepositoryError,
    SetupFailedError,
    SetupResult,
    Workspace,
    WorkspaceError,
    WorkspaceInfo,
    default_root,
    read_info,
    valid_name,
    write_info,
)
from .paths import copy_into, inside, matches, remove_tree
from .ports import allocation_lock, free_block
from .snapshot import commit_tree, private_index, snapshot_tree

__all__ = [
    "create_workspace",
    "find_workspaces",
    "open_workspace",
    "remove_workspace",
    "run_setup",
]

SETUP_OUTPUT = 64 * 1024
"""Bytes of the setup command's output kept with the task (the whole of it is in its log file)."""
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def repository_of(directory: Path) -> tuple[Path, Path]:
    """The top of the git repository holding ``directory`` and its git directory; a clear error if
    there is none."""
    if not directory.is_dir():
        raise WorkspaceError(f"{directory} is not a directory")
    directory = Path(os.path.realpath(directory))
    try:
        found = run_git(["rev-parse", "--absolute-git-dir"], cwd=directory)
    except GitError as exc:
        if "not a git repository" not in exc.stderr:
            raise
        raise NotAGitRepositoryError(
            f"{directory} is not inside a git repository: a worktree needs one "
            "(choose the workspace `copy` for a plain copy of the directory)"
        ) from exc
    git_dir = Path(os.path.realpath(found.stdout.decode().strip()))
    # The top is the directory whose ``.git`` leads to that git directory, found by us: git's own
    # answer follows ``core.worktree``, which the repository's configuration may point anywhere.
    for top in (directory, *directory.parents):
        if _leads_to(top / ".git", git_dir):
            return top, git_dir
    raise NotAGitRepositoryError(f"{directory} is in a git repository with no work tree here (a bare one?)")


def _leads_to(dot_git: Path, git_dir: Path) -> bool:
    try:
        if dot_git.is_symlink() or dot_git.is_dir():
            return Path(os.path.realpath(dot_git)) == git_dir
        text = dot_git.read_text(errors="replace")[:4096]
    except OSError:
        return False
    if not text.startswith("gitdir: "):
        return False
    target = Path(text[len("gitdir: ") :].strip())
    return Path(os.path.realpath(dot_git.parent / target)) == git_dir


def create_workspace(
    source: Path, name: str, mode: str = "worktree", options: WorkspaceOptions | None = None
) -> Workspace:
    """A new workspace ``name`` (a suffix is added if that name is taken) made from ``source``:
    ``worktree``: a git worktree and branch of the repository holding ``source``, from
    ``options.base`` (default HEAD); ``copy``: a copy of the directory, with a private repository
    for its checkpoints.  The files matching ``options.copy_globs`` are copied in and a block of
    ports is reserved; the setup command is not run (:func:`run_setup`)."""
    options = options or WorkspaceOptions()
    valid_name(name)
    root = Path(os.path.realpath(options.root or default_root()))
    source = Path(os.path.realpath(source))
    if mode == "worktree":
        top, git_dir = repository_of(source)
    elif mode == "copy":
        if not source.is_dir():
            raise WorkspaceError(f"{source} is not a directory to copy")
        top, git_dir = source, None
        with contextlib.suppress(NotAGitRepositoryError):
            _, git_dir = repository_of(source)
    else:
        raise WorkspaceError(f"a workspace is made as a worktree or a copy, not {mode!r}")
    if inside(top, root) or inside(root, top):
        raise WorkspaceError(f"the workspaces' root {root} must be outside {top} (and not hold it)")
    group = (
        root / f"{_SLUG.sub('-', top.name)[:40] or 'root'}-{hashlib.sha1(str(top).encode()).hexdigest()[:8]}"
    )
    if mode == "worktree":
        assert git_dir is not None
        return _worktree(top, git_dir, group, root, name, options)
    return _copy(source, git_dir, group, root, name, options)


def _recorded(info: WorkspaceInfo, fill: Callable[[Workspace], None]) -> Workspace:
    """Record the workspace first (so it can be found and removed), then fill it; one that could not
    be finished is taken away again, so nothing half-made is left."""
    ws = Workspace(info)
    write_info(info)
    try:
        fill(ws)
    except BaseException:
        with contextlib.suppress(Exception):
            remove_workspace(ws, delete_branch=True)
        raise
    return ws


def _free_name(group: Path, name: str, taken: Callable[[str], bool]) -> str:
    for n in range(1, 1000):
        candidate = name if n == 1 else f"{name}-{n}"
        if (
            not (group / candidate).exists()
            and not (group / ".meta" / candidate).exists()
            and not taken(candidate)
        ):
            return candidate
    raise WorkspaceError(f"no free workspace name like {name!r} in {group}")


def _worktree(
    top: Path, git_dir: Path, group: Path, root: Path, name: str, options: WorkspaceOptions
) -> Workspace:
    main = GitRepo(git_dir, top)
    base_ref = options.base or "HEAD"
    try:
        base = _rev(main, f"{base_ref}^{{commit}}")
    except GitError as exc:
        why = "the repository has no commit yet" if base_ref == "HEAD" else f"no commit {base_ref!r}"
        raise WorkspaceError(f"cannot make a worktree of {top}: {why}") from exc

    def taken(candidate: str) -> bool:
        refs = [f"refs/heads/{options.branch_prefix}{candidate}", f"{CHECKPOINT_REFS}/{candidate}/"]
        found = run_git(["for-each-ref", "--count=1", "--format=%(refname)", *refs], repo=main).stdout
        return bool(found.strip())

    group.mkdir(parents=True, exist_ok=True)
    name = _free_name(group, name, taken)
    branch = f"{options.branch_prefix}{name}"
    if run_git(["check-ref-format", f"refs/heads/{branch}"], repo=main, check=False).returncode:
        raise WorkspaceError(f"{branch!r} is not a valid branch name (see branch_prefix)")
    path, meta = group / name, group / ".meta" / name
    meta.mkdir(parents=True)
    reason = f"orchestrate workspace {name}"
    # No checkout by `worktree add` (it would run a child git); the files come from read-tree below.
    run_git(
        ["worktree", "add", "--no-checkout", "--lock", "--reason", reason, "-b", branch, str(path), base],
        repo=main,
    )
    admin = Path(run_git(["rev-parse", "--absolute-git-dir"], cwd=path).stdout.decode().strip())

    def fill(ws: Workspace) -> None:
        run_git(["read-tree", "--reset", "-u", "HEAD"], repo=ws.repo, config=neutral_filters(ws.repo))
        listing = run_git(["ls-files", "-z", "--others", "--directory"], repo=main, cwd=top).stdout
        _finish(ws, top, listing, options)

    info = WorkspaceInfo(
        name=name,
        mode="worktree",
        path=path,
        git_dir=admin,
        source=top,
        source_git_dir=git_dir,
        base=base,
        branch=branch,
        meta=meta,
        root=root,
        keep=options.keep,
    )
    return _recorded(info, fill)


def _copy(
    source: Path, git_dir: Path | None, group: Path, root: Path, name: str, options: WorkspaceOptions
) -> Workspace:
    group.mkdir(parents=True, exist_ok=True)
    name = _free_name(group, name, lambda _: False)
    path, meta = group / name, group / ".meta" / name
    meta.mkdir(parents=True)
    path.mkdir()
    private = meta / "git"
    run_git(["init", "--quiet", "--bare", str(private)], cwd=meta)
    branch = f"{options.branch_prefix}{name}"
    info = WorkspaceInfo(
        name=name,
        mode="copy",
        path=path,
        git_dir=private,
        source=source,
        source_git_dir=git_dir,
        base="",
        branch=branch,
        meta=meta,
        root=root,
        keep=options.keep,
    )
    return _recorded(info, lambda ws: _fill_copy(ws, source, git_dir, options))


def _fill_copy(ws: Workspace, source: Path, git_dir: Path | None, options: WorkspaceOptions) -> None:
    path, private, branch, name = ws.path, ws.info.git_dir, ws.info.branch, ws.info.name
    run_git(["config", "core.bare", "false"], repo=GitRepo(private))
    listing = b""
    if git_dir is not None:
        # A directory in a repository: what git would see (tracked and untracked, not ignored).
        files = run_git(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=source).stdout
        for rel in {f for f in files.decode("utf-8", "surrogateescape").split("\0") if f}:
            with contextlib.suppress(FileNotFoundError):  # tracked but deleted
                copy_into(source, rel, path)
        listing = run_git(
            ["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"], cwd=source
        ).stdout
    else:
        for child in sorted(source.iterdir()):
            copy_into(source, child.name, path)
    with private_index(ws) as index:
        tree = snapshot_tree(ws, index)
    base = commit_tree(ws.repo, tree, f"orchestrate: {source} as copied for {name}\n", [])
    run_git(["update-ref", f"refs/heads/{branch}", base], repo=ws.repo)
    run_git(["symbolic-ref", "HEAD", f"refs/heads/{branch}"], repo=ws.repo)
    ws.update(base=base)
    _finish(ws, source, listing, options)


def _finish(ws: Workspace, source: Path, untracked: bytes, options: WorkspaceOptions) -> None:
    """Copy in the files the globs pick among ``untracked`` (NUL-separated, directories ending in
    ``/``), then reserve the ports and record it all."""
    copied: list[str] = []
    for rel in untracked.decode("utf-8", "surrogateescape").split("\0"):
        if rel and matches(rel, options.copy_globs):
            with contextlib.suppress(FileNotFoundError):
                copied += copy_into(source, rel, ws.path)
    with allocation_lock(ws.info.root):
        ports = free_block(ws.info.root, options.ports) if options.ports else None
        ws.update(ports=ports, copied=sorted(copied))


def open_workspace(info: WorkspaceInfo | dict[str, object]) -> Workspace:
    """The workspace a stored record names; an error if it has been removed."""
    record = info if isinstance(info, WorkspaceInfo) else WorkspaceInfo.model_validate(info)
    if not (record.meta / INFO_FILE).exists() or not record.path.is_dir():
        raise WorkspaceError(f"the workspace {record.name} at {record.path} no longer exists (removed?)")
    return Workspace(read_info(record.meta))


def find_workspaces(root: Path | None = None) -> list[Workspace]:
    """Every workspace recorded under ``root`` (default: $ORCHESTRATE_HOME/workspaces)."""
    base = Path(root or default_root())
    found = []
    for record in sorted(base.glob(f"*/.meta/*/{INFO_FILE}")):
        with contextlib.suppress(WorkspaceError):
            found.append(Workspace(read_info(record.parent)))
    return found


def run_setup(
    ws: Workspace, command: str, timeout: float = 600.0, env: dict[str, str] | None = None
) -> SetupResult:
    """Run ``command`` with ``sh -c`` in the workspace (its ports in the environment), its output in
    ``setup.log`` beside it and the end of it in the result (and the record).  Raises
    :class:`SetupFailedError` if it fails or outlasts ``timeout``; every process it started is
    killed then."""
    log = ws.info.meta / "setup.log"
    started = time.monotonic()
    timed_out = False
    with log.open("wb") as out:
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command],
                cwd=ws.path,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {}), **ws.env()},
                start_new_session=True,
            )
        except OSError as exc:
            raise WorkspaceError(f"the setup command could not start: {exc}") from exc
        try:
            code: int | None = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out, code = True, None
        except BaseException:
            _kill(proc)
            raise
        _kill(proc)  # whatever it left running in the background goes too
    with log.open("rb") as f:
        f.seek(max(0, log.stat().st_size - SETUP_OUTPUT))
        output = f.read().decode("utf-8", "replace")
    result = SetupResult(
        command=command,
        exit_code=code,
        output=output,
        seconds=time.monotonic() - started,
        timed_out=timed_out,
    )
    ws.update(setup=result)
    if not result.ok:
        raise SetupFailedError(result)
    return result


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def remove_workspace(ws: Workspace, *, delete_branch: bool | None = None) -> None:
    """Remove the work tree, its checkpoints and our files; the branch too unless it holds commits
    beyond the base (``delete_branch`` decides otherwise).  Refused while a run uses it."""
    info = ws.info
    with ws.exclusive():
        if info.mode == "worktree":
            _remove_worktree(ws, delete_branch)
        remove_tree(info.root, info.path)
        remove_tree(info.root, info.meta)


def _remove_worktree(ws: Workspace, delete_branch: bool | None) -> None:
    info = ws.info
    assert info.source_git_dir is not None
    main = GitRepo(info.source_git_dir, info.source)
    refs = run_git(["for-each-ref", "--format=%(refname)", ws.refs], repo=main).stdout.decode().split()
    if refs:
        run_git(["update-ref", "--stdin"], repo=main, input="".join(f"delete {r}\n" for r in refs).encode())
    run_git(["worktree", "unlock", str(info.path)], repo=main, check=False)
    if run_git(
        ["worktree", "remove", "--force", "--force", str(info.path)], repo=main, check=False
    ).returncode:
        run_git(["worktree", "prune"], repo=main, check=False)
    tip = run_git(["rev-parse", "--verify", "--quiet", f"refs/heads/{info.branch}"], repo=main, check=False)
    sha = tip.stdout.decode().strip()
    if sha and (delete_branch if delete_branch is not None else sha == info.base):
        run_git(["update-ref", "-d", f"refs/heads/{info.branch}", sha], repo=main, check=False)


def _rev(repo: GitRepo, ref: str) -> str:
    return run_git(["rev-parse", "--verify", "--end-of-options", ref], repo=repo).stdout.decode().strip()
