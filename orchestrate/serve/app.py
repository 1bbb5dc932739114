"""The ASGI app: the API routers, the board page, the door in front of them, and (in its lifespan)
the engine's worker, the feeds' pollers and the webhooks."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import httpx
from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from ..engine import Engine
from . import page, routes_approvals, routes_misc, routes_streams, routes_tasks, workspace_routes
from .config import ServeConfig, is_loopback
from .errors import install_handlers
from .feeds import FeedHub
from .routes_misc import availability
from .security import CSRF_HEADER, Door, allowed_hosts
from .state import Services
from .webhooks import Webhooks, WebhookSender

__all__ = ["create_app"]


def create_app(config: ServeConfig, engine: Engine | None = None) -> FastAPI:
    """The app for ``config`` (its token must be set).  ``engine``: one the caller opened and keeps
    (its worker is run here if ``config.worker``); None: the app opens one on ``config.store``."""
    if not config.token:
        raise ValueError("the server needs a token")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            eng = (
                engine
                if engine is not None
                else await stack.enter_async_context(Engine.open(config.store, capacity=config.capacity))
            )
            tg = await stack.enter_async_context(anyio.create_task_group())
            svc = Services(config, eng, FeedHub(tg), FeedHub(tg))
            app.state.services = svc

            def check() -> None:
                tg.start_soon(availability, svc.executors)

            svc.check_executors = check
            svc.start_checks()
            if config.worker:
                tg.start_soon(eng.work)
            if config.webhooks:
                client = await stack.enter_async_context(httpx.AsyncClient(timeout=10.0))
                svc.webhooks = Webhooks(eng.store, [WebhookSender(h, client) for h in config.webhooks])
                tg.start_soon(svc.webhooks.run)
            try:
                yield
            finally:
                eng.stop()
                tg.cancel_scope.cancel()

    app = FastAPI(
        title="orchestrate",
        summary="Tasks for coding agents: queue, follow, approve.",
        description=__doc__ or "",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    install_handlers(app)
    for module in (routes_tasks, routes_approvals, routes_streams, routes_misc, workspace_routes, page):
        app.include_router(module.router)
    # The door goes outside everything (it is the last one added); CORS only when configured, outside
    # the door, so a preflight from an allowed origin is answered without a token (browsers send none).
    app.add_middleware(
        Door,
        token=config.token,
        hosts=allowed_hosts(config.host, is_loopback(config.host), config.allowed_hosts),
        origins=config.allow_origins,
        max_body=config.max_body,
        login_page=page.LOGIN_PAGE,
        login_hashes=page.LOGIN_HASHES,
    )
    if config.allow_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=config.allow_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["authorization", "content-type", "last-event-id", CSRF_HEADER],
            max_age=600,
        )
    return app
