"""Executors with their availability, the board page's session cookie, and the server's health."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Query, Request, Response

from ..registry import default_registry
from .errors import ApiError
from .models import ExecutorInfo
from .security import COOKIE, session_value
from .state import Services, services

__all__ = ["availability", "router"]

router = APIRouter(prefix="/api", tags=["server"])
Svc = Annotated[Services, Depends(services)]


def placeholder(name: str) -> dict[str, Any]:
    """An executor whose availability is still being checked."""
    cls = default_registry.get(name)
    return {
        "name": name,
        "protocol": cls.protocol,
        "installed": None,
        "version": None,
        "path": None,
        "reason": "checking",
        "capabilities": cls.capabilities.to_json_dict(),
    }


async def availability(rows: dict[str, dict[str, Any]]) -> None:
    """Fill ``rows`` with every registered executor: installed or not (its ``--version``; all asked
    at once, each row filled as its answer comes, since some CLIs take seconds to say)."""
    names = default_registry.names()
    for name in names:
        rows[name] = placeholder(name)

    async def check(name: str) -> None:
        avail = await default_registry.get(name)().check_availability()
        rows[name] = rows[name] | {
            "installed": avail.installed,
            "version": avail.version,
            "path": avail.path,
            "reason": avail.reason,
        }

    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(check, name)


@router.get("/executors", response_model=list[ExecutorInfo])
async def executors(svc: Svc, refresh: Annotated[bool, Query()] = False) -> list[dict[str, Any]]:
    """The executors, installed ones first.  Availability is checked once, in the background from
    the server's start (``refresh=true`` checks again); ``installed`` is null while it is checked."""
    if refresh:
        svc.start_checks()
    order = {True: 0, None: 1, False: 2}
    return sorted(svc.executors.values(), key=lambda r: (order[r["installed"]], r["name"]))


@router.post("/session", status_code=204)
async def open_session(request: Request, svc: Svc) -> Response:
    """Trade the bearer token for the board page's cookie (HttpOnly, SameSite=Strict)."""
    if request.scope.get("state", {}).get("auth") != "bearer":
        raise ApiError("unauthorized", "show the token as Authorization: Bearer TOKEN to open a session")
    token = svc.config.token
    assert token is not None
    response = Response(status_code=204)
    response.set_cookie(
        COOKIE,
        session_value(token),
        httponly=True,
        samesite="strict",
        secure=svc.config.cookie_secure,
        path="/",
        max_age=30 * 86400,
    )
    return response


@router.delete("/session", status_code=204)
async def close_session() -> Response:
    response = Response(status_code=204)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/health")
async def health(svc: Svc) -> dict[str, Any]:
    """Whether the engine works here, what the feeds hold, what the webhooks dropped."""
    items, size = svc.tasks.held()
    board_items, board_size = svc.board.held()
    hooks = svc.webhooks
    return {
        "worker": svc.engine.worker if svc.config.worker else None,
        "live_runs": len(svc.engine.live),
        "streams": svc.streams,
        "feeds": {"tasks": len(svc.tasks.feeds), "items": items + board_items, "bytes": size + board_size},
        "webhooks": hooks.stats() if hooks is not None else None,
        "store_errors": [str(e) for e in svc.engine.errors],
    }
