"""The live half of the JSON-RPC peer: awaitable calls, request handlers, notification callbacks.

Every call is bounded; when the agent dies every pending call fails at once with
:class:`ProcessExitedError`; every request the agent makes gets exactly one answer: its handler's
result, an error if the handler raised, or method-not-found if there is no handler.  The one
exception is a request the agent itself takes back (:meth:`JsonRpcConnection.withdraw`): its
handler is cancelled and it gets the answer the protocol asks for then, which may be none.  At most
:data:`MAX_SERVED` of the agent's requests are served at once: past that the read loop waits for one
to finish, so an agent that floods us with requests waits for us instead of growing our memory.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..errors import OrchestrateError, ProcessExitedError, ProtocolError
from ..peers.handshake import Handshake
from ..peers.jsonrpc import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    IncomingNotification,
    IncomingRequest,
    IncomingResponse,
    InvalidRequest,
    JsonRpcPeer,
    RequestId,
)
from ..process.base import AgentIO
from ..wire.lines import WireLine

__all__ = [
    "MAX_SERVED",
    "NO_ANSWER",
    "JsonRpcConnection",
    "JsonRpcError",
    "MakeHandshake",
    "RequestHandler",
    "RpcError",
    "is_handshake",
]

MAX_SERVED = 1000

RequestHandler = Callable[[IncomingRequest], Awaitable[Any]]
MakeHandshake = Callable[[JsonRpcPeer | None], Handshake]
"""peers/codex_opening.py's open_codex, peers/acp_opening.py's open_acp: a protocol's handshake."""
NotificationHandler = Callable[[str, Any], Awaitable[None]]


def is_handshake(opening: object, make: MakeHandshake) -> bool:
    """Whether ``opening`` (what the early start wrote) is byte for byte the handshake ``make``
    makes for a fresh conversation: all that a driver takes over."""
    return isinstance(opening, Handshake) and opening.lines == make(None).lines


class RpcError(OrchestrateError):
    """Raised by a request handler: the agent gets this error code and message."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        self.code, self.message, self.data = code, message, data
        super().__init__(message)


class JsonRpcError(OrchestrateError):
    """The agent answered one of our requests with an error."""

    def __init__(self, method: str, error: dict[str, Any]) -> None:
        self.method = method
        self.code = error.get("code")
        self.error_message = str(error.get("message"))
        self.data = error.get("data")
        super().__init__(f"{method} failed ({self.code}): {self.error_message}")


NO_ANSWER: Any = object()
"""For :meth:`JsonRpcConnection.withdraw`: write nothing back (the agent has settled it itself)."""


@dataclass
class _Serving:
    """A request of the agent's that a handler is working on."""

    method: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    answer: Any = NO_ANSWER  # what to send instead of the handler's answer, once withdrawn


@dataclass
class _Waiter:
    done: anyio.Event = field(default_factory=anyio.Event)
    response: IncomingResponse | None = None
    failure: Exception | None = None


class JsonRpcConnection:
    def __init__(
        self,
        peer: JsonRpcPeer,
        process: AgentIO,
        task_group: TaskGroup,
        handlers: Mapping[str, RequestHandler] | None = None,
        on_notification: NotificationHandler | None = None,
        max_served: int = MAX_SERVED,
    ) -> None:
        self.peer = peer
        self.process = process
        self.task_group = task_group
        self.handlers = dict(handlers or {})
        self.on_notification = on_notification
        self._waiters: dict[RequestId, _Waiter] = {}
        self._serving: dict[RequestId, _Serving] = {}
        self._closed: Exception | None = None
        self._limit = anyio.Semaphore(max_served)
        self._taken: RequestId | None = None  # a handshake written before this connection existed

    async def call(self, method: str, params: Any = None, limit: float | None = 60.0) -> Any:
        """Send a request and wait, at most ``limit`` seconds, for its result."""
        if self._closed is not None:
            raise self._closed
        request_id, line = self.peer.request(method, params)
        waiter = self._waiters[request_id] = _Waiter()
        return await self._result(request_id, method, waiter, limit, line)

    def take_handshake(self, make: MakeHandshake) -> None:
        """The handshake ``make`` makes was written before this connection existed (the early
        start's, run/early_opening.py): our peer makes it again, unwritten, and so holds its request
        pending as if it had written it (its id, its next one; never the early peer's state, which
        nothing checks against the bytes).  Its answer, maybe in the pipe already, is kept from now
        on: call this before the read loop starts."""
        own = make(self.peer)
        self.expect(own.request_id)
        self._taken = own.request_id

    async def handshake(self, make: MakeHandshake, limit: float | None) -> Any:
        """The agent's answer to the handshake ``make`` makes: the one taken over
        (:meth:`take_handshake`), else written now."""
        taken, self._taken = self._taken, None
        if taken is not None:
            return await self.answer(taken, limit)
        opening = make(self.peer)
        self.expect(opening.request_id)
        return await self.answer(opening.request_id, limit, write=opening.lines[0])

    def expect(self, request_id: RequestId) -> None:
        """A request of ours that was written before this connection existed (the early start's
        ``initialize``, run/early_opening.py): its answer is kept from now on, even one that
        comes before :meth:`answer` is awaited.  Its peer holds it pending."""
        if self._closed is None:
            self._waiters[request_id] = _Waiter()

    async def answer(self, request_id: RequestId, limit: float | None = 60.0, write: bytes = b"") -> Any:
        """The result of the request :meth:`expect` was told of, waited for at most ``limit``
        seconds, as :meth:`call` waits for its own (``write``: the request's line, sent first)."""
        if self._closed is not None:
            raise self._closed
        method = self.peer.pending.get(request_id, "a request")
        waiter = self._waiters.get(request_id)
        if waiter is None:
            raise ProtocolError(f"{method} ({request_id!r}) was not expected")
        return await self._result(request_id, method, waiter, limit, write)

    async def _result(
        self, request_id: RequestId, method: str, waiter: _Waiter, limit: float | None, line: bytes = b""
    ) -> Any:
        try:
            if line:
                await self.process.write(line)
            with anyio.fail_after(math.inf if limit is None else limit):
                await waiter.done.wait()
        except TimeoutError:
            raise ProtocolError(f"no answer to {method} within {limit:g} s") from None
        finally:
            self._waiters.pop(request_id, None)
            self.peer.pending.pop(request_id, None)
        if waiter.failure is not None:
            raise waiter.failure
        assert waiter.response is not None
        if waiter.response.error is not None:
            raise JsonRpcError(method, waiter.response.error)
        return waiter.response.result

    async def notify(self, method: str, params: Any = None) -> None:
        await self.process.write(self.peer.notify(method, params))

    async def on_line(self, line: WireLine) -> None:
        """One stdout line of the agent, as the wire parsed it."""
        event = self.peer.receive(line)
        match event:
            case IncomingResponse(id=request_id):
                waiter = self._waiters.get(request_id)
                if waiter is not None:
                    waiter.response = event
                    waiter.done.set()
            case IncomingRequest(id=request_id, method=method):
                await self._limit.acquire()  # released by _serve when the answer is written
                # Registered before its task starts, so a withdrawal on the very next line finds it.
                serving = self._serving[request_id] = _Serving(method)
                self.task_group.start_soon(self._serve, event, serving)
            case InvalidRequest(reply=reply):
                await self._send(reply)  # the normalizer shows the line; the agent hears why
            case IncomingNotification(method=method, params=params):
                if self.on_notification is not None:
                    await self.on_notification(method, params)
            case _:
                pass  # malformed lines and answers to nothing we wait for are the normalizer's to show

    def serving(self, method: str) -> list[RequestId]:
        """The agent's requests of ``method`` that are not answered yet."""
        return [rid for rid, s in self._serving.items() if s.method == method]

    def method_of(self, request_id: RequestId) -> str | None:
        """The method of the agent's request ``request_id`` while it is being served, else None."""
        serving = self._serving.get(request_id)
        return serving.method if serving is not None else None

    def withdraw(self, request_id: RequestId, answer: Any = NO_ANSWER) -> bool:
        """The agent took request ``request_id`` back (or it is moot): cancel its handler, and answer
        ``answer`` (a result, or an :class:`RpcError`) instead, or nothing with :data:`NO_ANSWER`.
        False if that request is not being served (answered already, or never seen)."""
        serving = self._serving.get(request_id)
        if serving is None or serving.scope.cancel_called:
            return False
        serving.answer = answer
        serving.scope.cancel()
        return True

    async def _serve(self, request: IncomingRequest, serving: _Serving) -> None:
        try:
            reply: bytes | None = None
            try:
                with serving.scope:
                    reply = await self._answer(request)
            finally:
                if self._serving.get(request.id) is serving:  # an agent may reuse an id; keep the newer
                    del self._serving[request.id]
            if serving.scope.cancel_called:
                reply = self._reply(request.id, serving.answer)
            if reply is not None:
                await self._send(reply)
        finally:
            self._limit.release()

    async def _send(self, reply: bytes) -> None:
        with contextlib.suppress(ProcessExitedError):  # the agent is gone; nobody waits for the answer
            await self.process.write(reply)

    async def _answer(self, request: IncomingRequest) -> bytes:
        handler = self.handlers.get(request.method)
        if handler is None:
            message = f"method not found: {request.method}"
            return self.peer.respond_error(request.id, METHOD_NOT_FOUND, message)
        try:
            return self.peer.respond(request.id, await handler(request))
        except RpcError as exc:
            return self.peer.respond_error(request.id, exc.code, exc.message, exc.data)
        except Exception as exc:  # a failing handler still answers, so the agent never hangs
            return self.peer.respond_error(request.id, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")

    def _reply(self, request_id: RequestId, answer: Any) -> bytes | None:
        if answer is NO_ANSWER:
            return None
        if isinstance(answer, RpcError):
            return self.peer.respond_error(request_id, answer.code, answer.message, answer.data)
        return self.peer.respond(request_id, answer)

    def close(self, reason: Exception | None = None) -> None:
        """The agent is gone: every pending call fails now, and later calls fail at once."""
        self._closed = reason or ProcessExitedError(
            self.process.returncode, self.process.stderr_tail, "the agent exited with requests unanswered"
        )
        for waiter in self._waiters.values():
            waiter.failure = self._closed
            waiter.done.set()
