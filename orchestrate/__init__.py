"""orchestrate: run coding-agent CLIs as subprocesses and get one typed, streaming entry model.

import anyio, orchestrate

async def main() -> None:
    executor = orchestrate.get_executor("claude-code")
    task = orchestrate.Task(prompt="fix the failing test", cwd="/path/to/repo")
    async with orchestrate.Run(executor, task, approvals=orchestrate.AutoApprove()) as run:
        async for patch in run.patches():
            print(patch.op, patch.index, patch.entry.type.kind, patch.entry.content[:60])
        result = await run.wait()
    print(result.outcome, result.session_id, result.token_usage)

anyio.run(main)
"""

from __future__ import annotations

import sys

from .lazy import lazy_exports

# Not typing's: ``python -m orchestrate`` and the ``orchestrate`` command import this package
# before they start the agent (cli/early.py), and typing (with re) costs ~3 ms of every start.
# mypy treats any ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    from .approvals import (
        ApprovalDecision,
        ApprovalRequest,
        ApprovalService,
        AutoApprove,
        AutoDeny,
        RulePolicy,
        TerminalPrompt,
    )
    from .entries import EntryPatch, NormalizedEntry, entry_json_schema
    from .errors import (
        ConfigError,
        ExecutorUnavailableError,
        OrchestrateError,
        ProcessExitedError,
        RunClosedError,
        UnknownExecutorError,
    )
    from .executors.base import Availability, Capabilities, Executor
    from .executors.options import ExecutorOptions
    from .registry import default_registry, get_executor, register
    from .replay import replay
    from .run import Run, RunResult
    from .task import Task
else:
    ModuleType = type(sys)  # types.ModuleType, without importing types

__version__ = "0.1.0"

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "ApprovalService",
    "AutoApprove",
    "AutoDeny",
    "Availability",
    "Capabilities",
    "ConfigError",
    "EntryPatch",
    "Executor",
    "ExecutorOptions",
    "ExecutorUnavailableError",
    "NormalizedEntry",
    "OrchestrateError",
    "ProcessExitedError",
    "RulePolicy",
    "Run",
    "RunClosedError",
    "RunResult",
    "Task",
    "TerminalPrompt",
    "UnknownExecutorError",
    "__version__",
    "default_registry",
    "entry_json_schema",
    "get_executor",
    "register",
    "replay",
]

# Each name is imported from its module when first asked for (PEP 562): ``python -m orchestrate``
# and ``import orchestrate.X`` load this package first, and a run must not wait for every module
# named here (the approval rules, the entry models, the run) before it starts its agent.
_WHERE = {
    **dict.fromkeys(
        (
            "ApprovalDecision",
            "ApprovalRequest",
            "ApprovalService",
            "AutoApprove",
            "AutoDeny",
            "RulePolicy",
            "TerminalPrompt",
        ),
        ".approvals",
    ),
    **dict.fromkeys(("EntryPatch", "NormalizedEntry", "entry_json_schema"), ".entries"),
    **dict.fromkeys(
        (
            "ConfigError",
            "ExecutorUnavailableError",
            "OrchestrateError",
            "ProcessExitedError",
            "RunClosedError",
            "UnknownExecutorError",
        ),
        ".errors",
    ),
    **dict.fromkeys(("Availability", "Capabilities", "Executor"), ".executors.base"),
    "ExecutorOptions": ".executors.options",
    **dict.fromkeys(("default_registry", "get_executor", "register"), ".registry"),
    **dict.fromkeys(("Run", "RunResult"), ".run"),
    "Task": ".task",
    "replay": ".replay",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals(), __all__)


class _Package(ModuleType):
    """The package's ``replay`` is the function, not its module.  Importing the module
    ``orchestrate.replay`` (first, by anyone) makes the import system set the package's attribute
    to the module; this keeps the function there instead.  (``replay`` is imported when first asked
    for, like every name here: its module loads the raw log's writer and the redactor, which a run
    needs only once its agent is started.)"""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "replay" and isinstance(value, ModuleType):
            value = value.replay
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
