"""What ``orchestrate serve`` is told: where to listen, the token, who may call across origins, the
webhooks, and the limits.  Read from ``$ORCHESTRATE_HOME/serve.toml`` (or ``--config``), with the
command line's options over it.

The token is the door's only key.  Unless one is configured (``token`` in the file, or
``$ORCHESTRATE_SERVE_TOKEN``), one is generated on first start and kept in
``$ORCHESTRATE_HOME/serve-token`` with mode 0600; a token file anyone else may read is refused, as ssh
refuses such a key.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import stat
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ConfigError
from ..store import home

__all__ = [
    "TOKEN_ENV",
    "ServeConfig",
    "Webhook",
    "is_loopback",
    "load_config",
    "load_or_create_token",
]

TOKEN_ENV = "ORCHESTRATE_SERVE_TOKEN"
WebhookEvent = Literal["needs_approval", "done", "failed"]
_ALL_EVENTS: tuple[WebhookEvent, ...] = ("needs_approval", "done", "failed")


class Webhook(BaseModel):
    """A URL told about tasks; each payload is signed with HMAC-SHA256 under ``secret``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(pattern=r"^https?://[^\s]+$", max_length=2000)
    secret: str = Field(min_length=16, max_length=1000, repr=False)
    events: list[WebhookEvent] = Field(default_factory=lambda: list(_ALL_EVENTS))
    attempts: int = Field(default=6, ge=1, le=20)
    backoff: float = Field(default=1.0, gt=0, le=600, description="seconds before the first retry (doubles)")
    max_queue: int = Field(default=1000, ge=1, le=1_000_000)


class ServeConfig(BaseModel):
    """Everything the server needs to know; see ``orchestrate serve --help`` for each option."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8420, ge=0, le=65535)
    token: str | None = Field(default=None, min_length=16, max_length=512, repr=False)
    token_configured: bool = False
    """The token was given (file, environment, option), not generated: a non-loopback bind needs it."""
    allow_origins: list[str] = Field(default_factory=list)
    """Origins allowed to call the API from a browser (CORS); none by default."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Host header names accepted besides the bound address (and the loopback names on loopback)."""
    webhooks: list[Webhook] = Field(default_factory=list)
    store: str | None = None
    worker: bool = True
    """Run the engine's queue in this process (False: only serve; workers elsewhere share the store)."""
    capacity: int = Field(default=4, ge=1, le=256)
    allow_commands: bool = False
    """Whether a task may name its own agent command, environment or workspace setup command
    (``base_command``, ``env``, ``workspace_options.setup``)."""
    roots: list[Path] = Field(default_factory=list)
    """Directories a task's working directory must lie under (empty: any directory); a worktree's
    whole repository too."""
    workspace_root: Path | None = None
    """Where tasks' workspaces are made (None: $ORCHESTRATE_HOME/workspaces of this server); a client
    cannot choose it."""
    max_body: int = Field(default=1 << 20, ge=1024, le=1 << 30)
    send_timeout: float = Field(default=30.0, gt=0)
    """Seconds a stream may wait for a client to take data before it is dropped (it resumes)."""
    poll: float = Field(default=0.05, gt=0, le=5)
    ring_items: int = Field(default=4096, ge=16)
    ring_bytes: int = Field(default=8 << 20, ge=1 << 16)
    """Each watched task's shared ring of recent frames: the most the server holds for its streams."""
    max_streams: int = Field(default=1000, ge=1)
    cookie_secure: bool = False

    @field_validator("allow_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if origin == "*" or not origin.startswith(("http://", "https://")) or origin.count("/") != 2:
                raise ValueError(f"an allowed origin is scheme://host[:port], not {origin!r}")
        return value


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` only listens on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        try:  # a name: loopback only if every address it names is
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return False
        return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def load_config(path: Path | None = None) -> dict[str, object]:
    """The settings in ``path`` (default ``$ORCHESTRATE_HOME/serve.toml``; missing: none)."""
    path = path or home() / "serve.toml"
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    if "token" in data:
        data["token_configured"] = True
    return data


def load_or_create_token(path: Path | None = None) -> tuple[str, bool]:
    """The token from ``$ORCHESTRATE_SERVE_TOKEN`` or the token file, made if missing.  Returns the
    token and whether it was configured (False: generated now or on an earlier first start)."""
    if env := os.environ.get(TOKEN_ENV):
        if len(env) < 16:
            raise ConfigError(f"${TOKEN_ENV} is shorter than 16 characters")
        return env, True
    path = path or home() / "serve-token"
    try:
        return _read_token(path), False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # another server made it meanwhile: use theirs
        return _read_token(path), False
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, False


def _read_token(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as f:
        mode = os.fstat(f.fileno()).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"{path} may be read by others (mode {stat.S_IMODE(mode):o}); chmod 600 it")
        token = f.read().strip()
    if len(token) < 16:
        raise ConfigError(f"{path} holds no token of at least 16 characters")
    return token
