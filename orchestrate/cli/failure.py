"""Why a run failed, in one line a person can act on: the reasons the run itself reads from what
the agent said (run/failure.py: the model unreachable, rate limited, the credentials refused), and
the CLI not installed, with the command that installs it."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

from ..executors.base import Executor
from ..run import RunResult
from ..run.failure import LABELS, Failure

__all__ = ["Failure", "classify", "install_command", "missing_cli"]


def classify(result: RunResult) -> Failure | None:
    """Why ``result`` failed, when it is one of the reasons the run recognises; None for a success
    or another failure (the last error then speaks for itself)."""
    return result.failure


# --- a CLI that is not installed ------------------------------------------------------------------


def _pins() -> dict[str, str]:
    """The versions the project tests with (clis/package.json of a source checkout); {} when this
    is an installed package without it."""
    for path in (Path(str(files("orchestrate"))).parent / "clis" / "package.json",):
        try:
            deps = json.loads(path.read_text()).get("dependencies")
        except (OSError, ValueError):
            continue
        if isinstance(deps, dict):
            return {k: v for k, v in deps.items() if isinstance(k, str) and isinstance(v, str)}
    return {}


def install_command(executor: type[Executor]) -> str | None:
    """``npm install -g @anthropic-ai/claude-code@2.1.330`` for an executor whose CLI is on npm (the
    version the project is tested with, when known); None otherwise."""
    package = executor.npm_package
    if not package:
        return None
    version = _pins().get(package)
    return f"npm install -g {package}@{version}" if version else f"npm install -g {package}"


def missing_cli(executor: type[Executor], reason: str) -> str:
    """The one line for an executor whose CLI was not found."""
    command = install_command(executor)
    program = f"`{executor.program}` " if executor.program else ""
    if command is not None:
        needs = f"{executor.name} needs {program}and it is not installed"
        return f"{LABELS['cli_missing']}: {needs}. Install it: {command}"
    return f"{LABELS['cli_missing']}: {executor.name}: {reason}"
