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

from typing import TYPE_CHECKING

from .lazy import lazy_exports

# Imported here, not when first asked for: the function has its module's name, and importing the
# module later would set the package's ``replay`` to the module.
from .replay import replay

if TYPE_CHECKING:
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
    from .executors.base import Availability, Capabilities, Executor, ExecutorOptions
    from .registry import default_registry, get_executor, register
    from .run import Run, RunResult
    from .task import Task

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
    **dict.fromkeys(("Availability", "Capabilities", "Executor", "ExecutorOptions"), ".executors.base"),
    **dict.fromkeys(("default_registry", "get_executor", "register"), ".registry"),
    **dict.fromkeys(("Run", "RunResult"), ".run"),
    "Task": ".task",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals(), __all__)
