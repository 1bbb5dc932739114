"""The ``orchestrate serve`` command (loaded only when asked for: it imports the ASGI stack)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from ..errors import ConfigError
from ..store import WorkerKindError, home

__all__ = ["serve_command"]


@click.command(name="serve")
@click.option("--host", help="Address to bind (default 127.0.0.1; another needs a configured token).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default 8420; 0 picks a free one).")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Settings file (default $ORCHESTRATE_HOME/serve.toml): token, allow_origins, webhooks, ...",
)
@click.option("--store", "url", envvar="ORCHESTRATE_STORE", help="The store's URL (default: SQLite).")
@click.option("--no-worker", is_flag=True, help="Only serve: workers elsewhere on the store run tasks.")
@click.option("--capacity", type=click.IntRange(1, 256), help="Runs at once in this server's worker.")
@click.option("--allow-origin", "origins", multiple=True, metavar="URL", help="Let this origin call (CORS).")
@click.option("--allowed-host", "hosts", multiple=True, metavar="NAME", help="Accept this Host name too.")
@click.option(
    "--allow-commands",
    is_flag=True,
    help="Let tasks name programs: their own agent command, environment, extra CLI arguments, CLI "
    "configuration, MCP servers and workspace setup command (without it a task may set only the model, "
    "permission mode, sandbox, approval policy and stable seconds). Not a sandbox: an agent given "
    "bypassPermissions or danger-full-access still runs what it decides to.",
)
@click.option(
    "--root",
    "roots",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Tasks' working directories must lie under one of these (repeatable).",
)
@click.option(
    "--workspace-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where tasks' worktrees and copies are made (default $ORCHESTRATE_HOME/workspaces).",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
def serve_command(
    host: str | None,
    port: int | None,
    config_path: Path | None,
    url: str | None,
    no_worker: bool,
    capacity: int | None,
    origins: tuple[str, ...],
    hosts: tuple[str, ...],
    allow_commands: bool,
    roots: tuple[Path, ...],
    workspace_root: Path | None,
    log_level: str,
) -> None:
    """Serve the HTTP API, the live streams and the board page, with the engine's worker inside.

    \b
    Every request needs the token: generated on first start into
    $ORCHESTRATE_HOME/serve-token (mode 0600) and printed, or configured
    ($ORCHESTRATE_SERVE_TOKEN, or token in serve.toml).  Binds 127.0.0.1 by
    default; any other address is refused unless a token is configured.
    From another machine, prefer an SSH tunnel:
      ssh -L 8420:127.0.0.1:8420 HOST      then open http://127.0.0.1:8420/
    The API is described at /api/openapi.json (it needs the token too).

    \b
    serve.toml:
      token = "..."                       # at least 16 characters
      allow_origins = ["https://board.example"]
      [[webhooks]]
      url = "https://chat.example/hook"
      secret = "..."                      # signs each payload (HMAC-SHA256)
      events = ["needs_approval", "done", "failed"]
    """
    try:
        from .config import ServeConfig, load_config
        from .server import serve
    except ImportError as exc:  # the extra is not installed
        raise click.ClickException(
            f"orchestrate serve needs the serve extra: pip install 'agent-orchestrate[serve]' ({exc})"
        ) from exc
    try:
        settings: dict[str, Any] = load_config(config_path or home() / "serve.toml")
        given = {
            "host": host,
            "port": port,
            "store": url,
            "capacity": capacity,
            "worker": False if no_worker else None,
            "allow_commands": True if allow_commands else None,
            "workspace_root": workspace_root.resolve() if workspace_root else None,
        }
        settings |= {k: v for k, v in given.items() if v is not None}
        for key, values in (("allow_origins", origins), ("allowed_hosts", hosts), ("roots", roots)):
            if values:
                settings[key] = [*settings.get(key, []), *values]
        config = ServeConfig(**settings)
        serve(config, say=lambda line: click.echo(line, err=True), log_level=log_level)
    except (ConfigError, ValidationError, WorkerKindError) as exc:
        raise click.ClickException(str(exc)) from exc
