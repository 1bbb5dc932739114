"""What an executor is: a description of one agent CLI.  It owns no read loop."""

from __future__ import annotations

import abc
import os
import sys

from ..errors import ExecutorUnavailableError
from ..process.env import NESTING_VARIABLES, build_env
from ..process.record import Record
from ..process.spec import ProcessSpec

# No pydantic and no anyio here: the CLI's early start (cli/early.py) builds the command line with
# the executor's own code before either is loaded, so that the agent starts first.  The options
# model lives in options.py and is imported from here when first asked for.  Nor dataclasses
# (which imports inspect), shutil or shlex, for the same reason: about 20 ms of CPU on every
# start, before the agent could be spawned (process/record.py).  Nor typing and pathlib (with re,
# fnmatch, urllib.parse, ipaddress): ~3 and ~5 ms more.  (mypy takes any TYPE_CHECKING as true.)
TYPE_CHECKING = False
if TYPE_CHECKING:  # types only: an executor is described before its normalizer is loaded
    from pathlib import Path
    from typing import Any, ClassVar

    from ..approvals.base import ApprovalService
    from ..normalizers.base import Normalizer
    from ..task import Task
    from .options import ExecutorOptions

__all__ = ["Availability", "Capabilities", "Executor", "ExecutorOptions", "find_program"]

BIN_PATH_VARIABLE = "ORCHESTRATE_BIN_PATH"


class Capabilities(Record):
    """What an agent supports, declared up front (the seed's AgentCapabilities, grown)."""

    __slots__ = (  # noqa: RUF023 - the fields in the constructor's order
        "protocol",
        "session_resume",
        "fork",
        "approvals",
        "mcp",
        "mid_execution_messages",
        "interrupt",
        "requires_setup",
    )
    protocol: str
    session_resume: bool
    fork: bool
    approvals: bool
    mcp: bool
    mid_execution_messages: bool
    interrupt: bool
    requires_setup: bool

    def __init__(
        self,
        protocol: str,
        session_resume: bool = False,
        fork: bool = False,
        approvals: bool = False,
        mcp: bool = False,
        mid_execution_messages: bool = False,
        interrupt: bool = False,
        requires_setup: bool = False,
    ) -> None:
        self.protocol = protocol
        self.session_resume = session_resume
        self.fork = fork
        self.approvals = approvals
        self.mcp = mcp
        self.mid_execution_messages = mid_execution_messages
        self.interrupt = interrupt
        self.requires_setup = requires_setup

    def to_json_dict(self) -> dict[str, Any]:
        """The seed's ``AgentCapabilities`` JSON form (orchestrate/contract)."""
        from ..contract import AgentCapabilities, seed_protocol  # pydantic models, not needed to spawn

        return AgentCapabilities(
            supports_session_resume=self.session_resume,
            requires_setup=self.requires_setup,
            supports_approvals=self.approvals,
            supports_mcp=self.mcp,
            protocol=seed_protocol(self.protocol),
            supports_mid_execution_messages=self.mid_execution_messages,
            supports_fork=self.fork,
            supports_interrupt=self.interrupt,
            wire_protocol=self.protocol if seed_protocol(self.protocol) != self.protocol else None,
        ).to_json_dict()


class Availability(Record):
    """Whether an agent's CLI is installed, which version, and whether it has credentials."""

    __slots__ = ("name", "installed", "version", "path", "reason", "credentials", "credentials_source")  # noqa: RUF023
    name: str
    installed: bool
    version: str | None
    path: str | None
    reason: str | None
    credentials: bool | None
    """Whether credentials or a model provider are configured (None: the executor cannot tell)."""
    credentials_source: str | None

    def __init__(
        self,
        name: str,
        installed: bool,
        version: str | None = None,
        path: str | None = None,
        reason: str | None = None,
        credentials: bool | None = None,
        credentials_source: str | None = None,
    ) -> None:
        self.name = name
        self.installed = installed
        self.version = version
        self.path = path
        self.reason = reason
        self.credentials = credentials
        self.credentials_source = credentials_source


def find_program(program: str) -> str | None:
    """``program`` on $ORCHESTRATE_BIN_PATH, then beside the running interpreter (a virtualenv's
    ``bin``, where a project-local install links the CLIs), then on $PATH."""
    places = [os.environ.get(BIN_PATH_VARIABLE), os.path.dirname(sys.executable), os.environ.get("PATH")]  # noqa: PTH120
    for path in places:
        found = _which(program, path) if path else None
        if found:
            return found
    return None


def _which(program: str, path: str) -> str | None:
    """``shutil.which(program, path=path)`` on POSIX, without importing shutil (and its bz2, lzma):
    ``program`` itself when it names a file, else the first executable regular file of that name
    in the directories of ``path``.  Unlike shutil.which, the name found is absolute: the agent is
    spawned in the task's directory, where a relative name (from a relative or empty PATH entry)
    would be looked up again, in the workspace the agent writes to."""
    if os.path.dirname(program):  # noqa: PTH120
        return os.path.abspath(program) if _is_program(program) else None  # noqa: PTH100
    seen: set[str] = set()
    for directory in path.split(os.pathsep):
        if directory in seen:
            continue
        seen.add(directory)
        candidate = os.path.join(directory, program)  # noqa: PTH118
        if _is_program(candidate):
            return os.path.abspath(candidate)  # noqa: PTH100
    return None


def _is_program(path: str) -> bool:
    return os.path.exists(path) and os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path)  # noqa: PTH110, PTH112


class Executor(abc.ABC):
    """Describes one agent CLI: command line, environment, capabilities, normalizer, approvals."""

    name: ClassVar[str]
    protocol: ClassVar[str]
    program: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    install_hint: ClassVar[str] = ""
    npm_package: ClassVar[str | None] = None
    """The npm package of the CLI, for installing and upgrading a pinned version."""
    transport: ClassVar[str] = "pipes"
    """How the agent is attached: "pipes", or "pty" for an agent that only has a text UI."""
    terminal_size: ClassVar[tuple[int, int]] = (50, 140)
    driver: ClassVar[str | None] = None
    """Which live driver runs it, when not the one of its protocol (several products share one)."""
    remove_env: ClassVar[tuple[str, ...]] = NESTING_VARIABLES

    def __init__(self, options: ExecutorOptions | None = None, **kwargs: Any) -> None:
        if options is None:
            from .options import ExecutorOptions

            options = ExecutorOptions(**kwargs)
        self.options = options

    def base_command(self) -> list[str]:
        """The command that starts the CLI, before our arguments."""
        base = self.options.base_command
        if isinstance(base, list) and base:
            return list(base)
        if isinstance(base, str) and base.strip():
            if base.isprintable() and not any(c in base for c in "'\"\\"):
                # Nothing to unquote, and no whitespace but spaces: shlex.split's words, without
                # its import (with re: ~13 ms of CPU before `orchestrate run -e acp --command ...`
                # could send its agent's command line; tests/test_early_executors.py).
                return base.split()
            import shlex  # only for a command given as one string (it imports re)

            return shlex.split(base)
        if not self.program:  # an executor for any agent of a kind: which one is for the user to say
            raise ExecutorUnavailableError(self.name, self.install_hint)
        found = find_program(self.program)
        if found is None:
            raise ExecutorUnavailableError(
                self.name, f"{self.program!r} not found on PATH. {self.install_hint}"
            )
        return [found]

    @abc.abstractmethod
    def build_argv(self, task: Task) -> list[str]:
        """The full command line for ``task``."""

    def env_additions(self, task: Task) -> dict[str, str]:
        """Variables this executor adds to the caller's environment."""
        return {}

    def policy_args(self, approvals: ApprovalService | None) -> list[str]:
        """Flags that fix the permission policy up front, for CLIs with no live approval channel
        (capabilities.approvals is False).  Most executors ask live and need none."""
        return []

    def process_spec(self, task: Task, approvals: ApprovalService | None = None) -> ProcessSpec:
        env = build_env(
            os.environ, {**self.env_additions(task), **self.options.env}, task.env, remove=self.remove_env
        )
        argv = self.build_argv(task) + self.policy_args(approvals)
        # (task.cwd as it is: a Path from the run, a str from the early start, which spawns before
        # pathlib is loaded; the spec is the same either way: process/spec.py)
        return ProcessSpec(argv=argv, cwd=task.cwd, env=env)

    def prepare(self, spec: ProcessSpec, task: Task) -> list[str]:
        """Work around a CLI's known trouble before its process starts (files it would clobber, say);
        returns what was done, for the raw log.  Most executors need nothing."""
        return []

    @classmethod
    def prepares(cls, resume: str | None) -> bool:
        """Whether :meth:`prepare` may do anything for a run that resumes ``resume`` (None: a new
        session): ``orchestrate run`` starts the agent before its run exists only where it does not
        (cli/early.py).  An executor whose preparation is for resumed sessions alone says so here."""
        return cls.prepare is not Executor.prepare

    @abc.abstractmethod
    def create_normalizer(self) -> Normalizer:
        """A fresh normalizer for one run (or one replay) of this agent's output."""

    def capture_normalizer(self, first_line: bytes) -> Normalizer:
        """A normalizer for a plain stdout capture that starts with ``first_line`` (an executor whose
        CLI has several output formats picks the one the capture is in)."""
        return self.create_normalizer()

    async def check_availability(self) -> Availability:
        """Installed or not, and which version; runs ``--version`` with a bounded wait."""
        try:
            argv = self.base_command()
        except ExecutorUnavailableError as exc:
            return Availability(self.name, False, reason=exc.reason)
        import subprocess

        import anyio

        try:
            with anyio.fail_after(20):
                done = await anyio.run_process([*argv, "--version"], check=False, stdin=subprocess.DEVNULL)
        except (OSError, TimeoutError) as exc:
            return Availability(self.name, False, path=argv[0], reason=f"cannot run {argv[0]}: {exc}")
        text = done.stdout.decode("utf-8", "replace").strip().splitlines()
        if done.returncode != 0 or not text:
            return Availability(self.name, False, path=argv[0], reason=f"--version exited {done.returncode}")
        has, source = self.credentials()
        return Availability(
            self.name,
            True,
            version=self.parse_version(text[0]),
            path=argv[0],
            credentials=has,
            credentials_source=source,
        )

    def credentials(self) -> tuple[bool | None, str | None]:
        """Whether the CLI has credentials or a model provider configured, and where from.  Reads
        environment and files only: never the network."""
        return None, None

    def credential_env(self) -> dict[str, str]:
        """The environment the CLI would start with, for finding its credentials."""
        return {**os.environ, **self.options.env}

    @staticmethod
    def home(env: dict[str, str]) -> Path:
        from pathlib import Path

        return Path(env.get("HOME", str(Path.home())))

    @staticmethod
    def credentials_in(
        env: dict[str, str], variables: tuple[str, ...], files: tuple[Path, ...] = ()
    ) -> tuple[bool, str] | None:
        """The first of ``variables`` set (as ``$NAME``), else the first of ``files`` that exists."""
        for name in variables:
            if env.get(name):
                return True, f"${name}"
        for path in files:
            if path.is_file():
                return True, str(path)
        return None

    @staticmethod
    def parse_version(first_line: str) -> str:
        return first_line.split()[0] if first_line.split() else first_line


def __getattr__(name: str) -> Any:
    # ``from orchestrate.executors.base import ExecutorOptions`` as before, without pydantic at import
    if name == "ExecutorOptions":
        from .options import ExecutorOptions

        return ExecutorOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
