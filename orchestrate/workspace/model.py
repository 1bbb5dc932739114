"""A workspace as it is recorded: where its work tree and git directory are, what it started from,
its ports and its setup; and the lock that says a run is using it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from ..errors import OrchestrateError
from .git import GitRepo

__all__ = [
    "CHECKPOINT_REFS",
    "NotAGitRepositoryError",
    "SetupFailedError",
    "SetupResult",
    "Workspace",
    "WorkspaceError",
    "WorkspaceInUseError",
    "WorkspaceInfo",
    "default_root",
]

CHECKPOINT_REFS = "refs/orchestrate/checkpoints"
INFO_FILE = "workspace.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class WorkspaceError(OrchestrateError):
    """A workspace that cannot be made, found, used or removed; the message says why."""

    code = "workspace_error"


class NotAGitRepositoryError(WorkspaceError):
    code = "not_a_git_repository"


class WorkspaceInUseError(WorkspaceError):
    code = "workspace_in_use"


class SetupResult(BaseModel):
    """What the setup command did: its output (the end of it) is kept with the task."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: str
    exit_code: int | None
    output: str
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SetupFailedError(WorkspaceError):
    code = "setup_failed"

    def __init__(self, result: SetupResult) -> None:
        self.result = result
        how = "timed out" if result.timed_out else f"exited with code {result.exit_code}"
        tail = result.output[-2000:].strip()
        super().__init__(f"the setup command {result.command!r} {how}" + (f":\n{tail}" if tail else ""))


class WorkspaceInfo(BaseModel):
    """Everything needed to find a workspace again (stored with its task and beside it on disk)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    mode: Literal["worktree", "copy"]
    path: Path = Field(description="the work tree the agent runs in")
    git_dir: Path = Field(description="its git directory, pinned (never read from the .git file again)")
    source: Path = Field(description="the repository (worktree) or the directory (copy) it was made from")
    source_git_dir: Path | None = Field(default=None, description="the source repository's git directory")
    base: str = Field(description="the commit it started from")
    branch: str
    meta: Path = Field(description="our own files: this record, the lock, the setup log, the index")
    root: Path
    ports: tuple[int, int] | None = Field(default=None, description="(first port, how many)")
    keep: bool = False
    created_at: float = Field(default_factory=time.time)
    setup: SetupResult | None = None
    copied: list[str] = Field(default_factory=list, description="files copied in by the globs")


def default_root() -> Path:
    """$ORCHESTRATE_HOME/workspaces (~/.orchestrate/workspaces)."""
    home = os.environ.get("ORCHESTRATE_HOME")
    return (Path(home) if home else Path.home() / ".orchestrate") / "workspaces"


def valid_name(name: str) -> str:
    if not _NAME.match(name) or ".." in name or name.endswith((".lock", ".")):
        raise WorkspaceError(f"{name!r} is not a workspace name (letters, digits, . _ -; up to 100)")
    return name


class Workspace:
    """A task's workspace, opened from its :class:`WorkspaceInfo`."""

    def __init__(self, info: WorkspaceInfo) -> None:
        self.info = info

    @property
    def path(self) -> Path:
        return self.info.path

    @property
    def repo(self) -> GitRepo:
        """The work tree's repository, pinned."""
        return GitRepo(self.info.git_dir, self.info.path)

    @property
    def refs(self) -> str:
        """The private ref namespace of this workspace's checkpoints."""
        return f"{CHECKPOINT_REFS}/{self.info.name}/"

    @property
    def index(self) -> Path:
        """Our own index of the work tree (stat data kept between snapshots); never the agent's."""
        return self.info.meta / "index"

    def env(self) -> dict[str, str]:
        """What a run in this workspace gets in its environment: where it is, and its ports."""
        env = {"ORCHESTRATE_WORKSPACE": str(self.path), "ORCHESTRATE_WORKSPACE_BASE": self.info.base}
        if self.info.ports is not None:
            first, count = self.info.ports
            env |= {
                "ORCHESTRATE_PORT": str(first),
                "ORCHESTRATE_PORT_COUNT": str(count),
                "ORCHESTRATE_PORTS": f"{first}-{first + count - 1}",
            }
        return env

    def save(self) -> None:
        """Write the record beside the workspace (atomically)."""
        write_info(self.info)

    def update(self, **changes: object) -> None:
        self.info = self.info.model_copy(update=changes)
        self.save()

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """Held while a run works here: removal is refused meanwhile (by any process; a crashed
        holder's lock goes with it)."""
        with _flock(self.info.meta / "lock", fcntl.LOCK_SH, "it is being removed"):
            yield

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with _flock(self.info.meta / "lock", fcntl.LOCK_EX, "a run is using it"):
            yield

    def __repr__(self) -> str:
        return f"Workspace({self.info.name!r}, {str(self.path)!r})"


@contextlib.contextmanager
def _flock(path: Path, kind: int, busy: str) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise WorkspaceError(f"the workspace's lock {path} cannot be opened: {exc}") from exc
    try:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkspaceInUseError(f"the workspace {path.parent.name} is busy: {busy}") from None
        yield
    finally:
        os.close(fd)


def write_info(info: WorkspaceInfo) -> None:
    info.meta.mkdir(parents=True, exist_ok=True)
    tmp = info.meta / f".{INFO_FILE}.{os.getpid()}"
    tmp.write_bytes(orjson.dumps(info.model_dump(mode="json"), option=orjson.OPT_INDENT_2))
    tmp.replace(info.meta / INFO_FILE)


def read_info(meta: Path) -> WorkspaceInfo:
    try:
        return WorkspaceInfo.model_validate_json((meta / INFO_FILE).read_bytes())
    except (OSError, ValueError) as exc:
        raise WorkspaceError(f"no workspace record in {meta}: {exc}") from exc
