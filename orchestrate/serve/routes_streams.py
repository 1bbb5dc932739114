"""The live streams: one per task, one for the whole board (see :mod:`.streams` for the format)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response

from .errors import ApiError
from .feeds import Feed, follow
from .routes_tasks import ID, MAX_ID
from .state import Services, services
from .streams import EventStream, board_fetcher, newest_task_key, parse_board_id, task_fetcher

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["streams"])
Svc = Annotated[Services, Depends(services)]
_SSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"}
}


class _Sent(Response):
    """Lets an ASGI callable stand where FastAPI expects a response."""

    def __init__(self, stream: EventStream) -> None:
        super().__init__()
        self.stream = stream

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.stream(scope, receive, send)


def _feed(svc: Services, fetch: Any, start: Any) -> Feed[Any]:
    c = svc.config
    return Feed(fetch, start, poll=c.poll, max_items=c.ring_items, max_bytes=c.ring_bytes)


def _opened(svc: Services) -> None:
    if svc.streams >= svc.config.max_streams:
        raise ApiError("store_busy", f"{svc.config.max_streams} streams are open already; try again later")


@router.get("/tasks/{task_id}/stream", responses=_SSE, response_class=Response)
async def task_stream(
    task_id: ID,
    svc: Svc,
    request: Request,
    after: Annotated[int | None, Query(ge=0, le=MAX_ID, description="start after this seq")] = None,
    raw: Annotated[bool, Query(description="include the raw log records")] = False,
    last_event_id: Annotated[str | None, Header(max_length=100)] = None,
) -> Response:
    """The task's events after ``Last-Event-ID`` (or ``after``; default: from the start), then live
    ones, for as long as the client stays."""
    task = await svc.engine.get(task_id)
    start = after or 0
    if last_event_id is not None:
        if not last_event_id.isdigit():
            raise ApiError("invalid_request", "Last-Event-ID of a task stream is a seq number")
        start = int(last_event_id)
    if start > task.last_seq:
        raise ApiError("invalid_request", f"task {task_id} has no event {start} yet (last {task.last_seq})")
    _opened(svc)
    kinds = {"patch", "state", "notice"} | ({"raw"} if raw else set())
    fetch = task_fetcher(svc.store, task_id)

    async def frames() -> AsyncGenerator[bytes, None]:
        svc.streams += 1
        try:
            with svc.tasks.use(task_id, lambda: _feed(svc, fetch, task.last_seq)) as feed:
                async for chunk in follow(feed, start, accept=lambda i: i.kind in kinds):
                    yield chunk
        finally:
            svc.streams -= 1

    return _Sent(EventStream(frames(), send_timeout=svc.config.send_timeout))


@router.get("/stream", responses=_SSE, response_class=Response)
async def board_stream(
    svc: Svc,
    after: Annotated[str | None, Query(max_length=100, description="start after this event id")] = None,
    last_event_id: Annotated[str | None, Header(max_length=100)] = None,
) -> Response:
    """Every task as it changes: first each task's present state (or, resuming, each that changed
    since), then changes as they happen."""
    given = last_event_id or after
    start = 0
    if given is not None:
        parsed = parse_board_id(given)
        if parsed is None:
            raise ApiError("invalid_request", "a board event id is a change number")
        start = parsed
    store = svc.store
    now = await svc.call(lambda: newest_task_key(store))
    if start > now:
        # Not a number this store gave (the store was replaced): waiting for it would hide every
        # change until then, so the board gets every task once more instead.
        start = 0
    _opened(svc)
    fetch = board_fetcher(svc.store)

    async def frames() -> AsyncGenerator[bytes, None]:
        svc.streams += 1
        try:
            with svc.board.use("board", lambda: _feed(svc, fetch, now)) as feed:
                async for chunk in follow(feed, start, accept=lambda i: True):
                    yield chunk
        finally:
            svc.streams -= 1

    return _Sent(EventStream(frames(), send_timeout=svc.config.send_timeout))
