"""Running the app under uvicorn: the bind checks, the token, and what is printed at start."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import uvicorn

from ..errors import ConfigError
from ..store import Store
from .app import create_app
from .config import ServeConfig, is_loopback, load_or_create_token

__all__ = ["prepare", "serve"]


class _QuietDrops(logging.Filter):
    """A stream dropped on purpose (a client that took no data) ends its response unfinished, which
    uvicorn reports as an error; our own line (``orchestrate: stream dropped``) says it instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing response" not in record.getMessage()


def prepare(config: ServeConfig) -> ServeConfig:
    """``config`` with its token (configured, or from the token file, made on first start); refuses a
    non-loopback bind without a configured token."""
    if config.token is None:
        token, configured = load_or_create_token()
        config = config.model_copy(update={"token": token, "token_configured": configured})
    if not is_loopback(config.host) and not config.token_configured:
        raise ConfigError(
            f"binding {config.host} opens this server to other machines: configure a token first "
            "($ORCHESTRATE_SERVE_TOKEN, or token in serve.toml), and see the README on TLS"
        )
    return config


class _Server(uvicorn.Server):
    """Says where it listens once the socket is bound (``--port 0`` picks a free port)."""

    def __init__(self, config: uvicorn.Config, on_bound: Callable[[int], Any]) -> None:
        super().__init__(config)
        self.on_bound = on_bound

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        for server in self.servers:
            for sock in server.sockets:
                self.on_bound(int(sock.getsockname()[1]))
                return


def serve(config: ServeConfig, *, say: Callable[[str], Any] = print, log_level: str = "info") -> None:
    """Serve until SIGINT or SIGTERM."""
    config = prepare(config)
    if config.worker:
        # Refused before anything starts when Temporal workers work the store (--no-worker serves it).
        with Store.open(config.store) as store:
            store.check_worker_kind("plain")
    app = create_app(config)
    logging.getLogger("uvicorn.error").addFilter(_QuietDrops())
    host = f"[{config.host}]" if ":" in config.host else config.host

    def bound(port: int) -> None:
        base = f"http://{host}:{port}"
        mode = "worker here" if config.worker else "no worker: serving only"
        say(f"orchestrate serve on {base} ({mode})")
        say(f"board: {base}/#token={config.token}")
        say(f"API:   curl -H 'Authorization: Bearer {config.token}' {base}/api/tasks")

    server = _Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level=log_level,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            h11_max_incomplete_event_size=32 * 1024,
            timeout_graceful_shutdown=5,
        ),
        bound,
    )
    server.run()
