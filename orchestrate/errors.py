"""Every error orchestrate raises derives from :class:`OrchestrateError`.

    OrchestrateError
    ├── ConfigError                 bad options, a bad policy file, a bad --env
    ├── UnknownExecutorError        no executor by that name (lists the known ones)
    ├── ExecutorUnavailableError    the CLI is not installed or cannot run
    ├── SpawnError                  the process could not be started
    ├── ProcessExitedError          the process died; carries exit code and stderr tail
    ├── ProtocolError               the agent broke its protocol
    ├── RunTimeoutError             the run went past its time limit
    ├── RunClosedError              a message or interrupt sent to a run that has ended
    └── RawLogError                 a file given to replay is neither a raw log nor a capture

Foreign exceptions (OSError, pydantic's ValidationError ...) are translated where they cross into
our code and chained with ``from``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # types only: this is on the path to the early spawn (cli/early.py)
    from collections.abc import Iterable

__all__ = [
    "ConfigError",
    "ExecutorUnavailableError",
    "OrchestrateError",
    "ProcessExitedError",
    "ProtocolError",
    "RawLogError",
    "RunClosedError",
    "RunTimeoutError",
    "SpawnError",
    "UnknownExecutorError",
]


class OrchestrateError(Exception):
    """Root of every error raised by orchestrate."""


class ConfigError(OrchestrateError):
    """Options, a policy file or an environment override that cannot be used."""


class UnknownExecutorError(OrchestrateError):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = sorted(known)
        super().__init__(f"unknown executor {name!r}; known executors: {', '.join(self.known) or '(none)'}")


class ExecutorUnavailableError(OrchestrateError):
    def __init__(self, executor: str, reason: str) -> None:
        self.executor = executor
        self.reason = reason
        super().__init__(f"executor {executor!r} is not available: {reason}")


class SpawnError(OrchestrateError):
    def __init__(self, argv: list[str], reason: str) -> None:
        self.argv = argv
        # Empty when nothing is named yet (a supervisor spawned before its agent is known).
        what = repr(argv[0]) if argv else "the agent"
        super().__init__(f"could not start {what}: {reason}")


class ProcessExitedError(OrchestrateError):
    def __init__(self, exit_code: int | None, stderr_tail: str, message: str | None = None) -> None:
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail
        text = message or f"the agent process exited with code {exit_code}"
        super().__init__(f"{text}\n--- stderr (tail) ---\n{stderr_tail}" if stderr_tail else text)


class ProtocolError(OrchestrateError):
    def __init__(self, message: str, line: str | None = None) -> None:
        self.line = line
        super().__init__(message)


class RunTimeoutError(OrchestrateError):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"the run exceeded its time limit of {seconds:g} s")


class RunClosedError(OrchestrateError):
    """The run has finished; it takes no more messages."""


class RawLogError(OrchestrateError):
    """A replay input that cannot be read."""
