"""``session/list`` (ACP 1.x): the sessions an ACP agent keeps for a working directory, so a board
or a person can pick one to resume.  A short conversation of its own: the agent is started,
initialized, asked (page after page, bounded), and stopped the way every run stops it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from ..errors import OrchestrateError
from ..executors.acp import AcpExecutor
from ..peers.jsonrpc import JsonRpcPeer
from ..process.pipes import AgentProcess, Chunk, ShutdownPolicy
from ..task import Task
from ..wire.lines import JsonLinesWire, WireLine
from .acp_session import offers
from .jsonrpc import JsonRpcConnection

__all__ = ["MAX_PAGES", "SessionsUnsupportedError", "list_sessions"]

MAX_PAGES = 20
_LIMIT = 60.0


class SessionsUnsupportedError(OrchestrateError):
    """The agent does not offer ``session/list``."""


async def list_sessions(executor: AcpExecutor, cwd: Path, limit: float = _LIMIT) -> list[dict[str, Any]]:
    """The agent's sessions for ``cwd`` (each ``{sessionId, cwd, title?, updatedAt?, ...}``), as it
    lists them, at most :data:`MAX_PAGES` pages."""
    spec = executor.process_spec(Task(prompt="", cwd=cwd))
    process = await AgentProcess.spawn(spec)
    try:
        with anyio.fail_after(limit):
            async with anyio.create_task_group() as tg:
                conn = JsonRpcConnection(JsonRpcPeer(), process, tg)
                tg.start_soon(_read, process, conn)
                sessions = await _pages(conn, cwd, limit)
                tg.cancel_scope.cancel()
    finally:
        await process.shutdown(ShutdownPolicy(interrupt_grace=0, stdin_grace=1.0, term_grace=1.0))
    if sessions is None:  # (raised out here, not as one of a task group's exceptions)
        raise SessionsUnsupportedError(f"{executor.name} does not offer session/list")
    return sessions


async def _pages(conn: JsonRpcConnection, cwd: Path, limit: float) -> list[dict[str, Any]] | None:
    init = await conn.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}}, limit)
    capabilities = init.get("agentCapabilities") if isinstance(init, dict) else None
    if not offers(capabilities if isinstance(capabilities, dict) else {}, "list"):
        return None
    sessions: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params: dict[str, Any] = {"cwd": str(cwd), **({"cursor": cursor} if cursor else {})}
        page = await conn.call("session/list", params, limit)
        page = page if isinstance(page, dict) else {}
        sessions += [s for s in page.get("sessions") or [] if isinstance(s, dict)]
        cursor = page.get("nextCursor") if isinstance(page.get("nextCursor"), str) else None
        if not cursor:
            break
    return sessions


async def _read(process: AgentProcess, conn: JsonRpcConnection) -> None:
    send, receive = anyio.create_memory_object_stream[Chunk](16)
    wire = JsonLinesWire()
    async with anyio.create_task_group() as tg:
        tg.start_soon(process.pump, send)
        async with receive:
            async for chunk in receive:
                if chunk.stream == "stdout":
                    for event in wire.feed(chunk.data, "stdout", None):
                        if type(event) is WireLine:
                            await conn.on_line(event)
    conn.close()
