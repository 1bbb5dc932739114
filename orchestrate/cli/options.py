"""What `run`, `submit` and the task commands take on the command line, read in one place: the
executor options, the workspace flags, and a text given as `-` (stdin)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..executors.base import ExecutorOptions
from ..executors.config import load_mcp_servers, parse_config_overrides
from ..task import WorkspaceOptions

__all__ = [
    "MAX_STDIN_CHARS",
    "build_executor_options",
    "read_stdin",
    "workspace_flags",
    "workspace_run_options",
]

MAX_STDIN_CHARS = 10_000_000
"""The longest prompt or message read from stdin: a prompt is text for a model, and a stream that
never ends (`yes | orchestrate send 1 -`) must not fill our memory."""


def read_stdin(what: str) -> str:
    """A prompt or message given as ``-``: stdin to its end, bounded by :data:`MAX_STDIN_CHARS`."""
    import sys

    text = sys.stdin.read(MAX_STDIN_CHARS + 1)
    if len(text) > MAX_STDIN_CHARS:
        raise click.UsageError(f"the {what} on stdin is longer than {MAX_STDIN_CHARS:,} characters")
    return text


def build_executor_options(
    *,
    model: str | None,
    permission_mode: str | None,
    base_command: str | None,
    sandbox: str | None,
    approval_policy: str | None,
    config_pairs: tuple[str, ...],
    mcp_config: Path | None,
    stable_seconds: float | None,
) -> ExecutorOptions:
    """Raises ConfigError for a bad ``-c`` pair or MCP file, as the options' own checks do."""
    return ExecutorOptions(
        model=model,
        permission_mode=permission_mode,
        base_command=base_command,
        sandbox=sandbox,
        approval_policy=approval_policy,
        config=parse_config_overrides(config_pairs),
        mcp_servers=load_mcp_servers(mcp_config) if mcp_config else {},
        stable_seconds=stable_seconds,
    )


def workspace_flags(f: Callable[..., Any]) -> Callable[..., Any]:
    """The workspace options ``run`` and ``submit`` take."""
    options = [
        click.option(
            "--worktree",
            "workspace",
            flag_value="worktree",
            help="Run in a new git worktree and branch of --cwd's repository (checkpointed every turn).",
        ),
        click.option(
            "--copy",
            "workspace",
            flag_value="copy",
            help="Run in a plain copy of --cwd (for a directory outside git; checkpointed too).",
        ),
        click.option(
            "--base", "workspace_base", metavar="REF", help="With --worktree: start from REF (default HEAD)."
        ),
        click.option(
            "--setup",
            "workspace_setup",
            metavar="CMD",
            help="A shell command run in the new workspace first.",
        ),
        click.option(
            "--copy-glob",
            "workspace_globs",
            multiple=True,
            metavar="GLOB",
            help="Untracked or ignored files copied into the workspace (default: .env*); repeatable.",
        ),
        click.option(
            "--keep-workspace",
            "workspace_keep",
            is_flag=True,
            default=None,
            help="`orchestrate workspace clean` leaves this task's workspace.",
        ),
        click.option(
            "--workspace-root",
            type=click.Path(file_okay=False, path_type=Path),
            help="Where workspaces are made (default: $ORCHESTRATE_HOME/workspaces).",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def workspace_run_options(
    workspace: str | None,
    workspace_base: str | None,
    workspace_setup: str | None,
    workspace_globs: tuple[str, ...],
    workspace_keep: bool | None,
    workspace_root: Path | None,
) -> dict[str, Any]:
    """The Task fields for the workspace flags (nothing when the run works in --cwd itself)."""
    if workspace is None:
        if workspace_base or workspace_setup or workspace_globs or workspace_root or workspace_keep:
            raise click.UsageError(
                "--base, --setup, --copy-glob, --keep-workspace and --workspace-root "
                "go with --worktree or --copy"
            )
        return {}
    options: dict[str, Any] = {"base": workspace_base, "setup": workspace_setup}
    if workspace_keep:
        options["keep"] = True
    if workspace_globs:
        options["copy_globs"] = list(workspace_globs)
    if workspace_root is not None:
        options["root"] = workspace_root.resolve()
    return {"workspace": workspace, "workspace_options": WorkspaceOptions(**options)}
