"""Errors as JSON with a stable code: ``{"error": {"code": "...", "message": "..."}}``.

The codes are part of the API (a board branches on them, never on the message):

=====================  ======  ==============================================================
code                   status  meaning
=====================  ======  ==============================================================
unauthorized           401     no token, or a wrong one
forbidden              403     a cross-site or foreign-host request, or a missing CSRF header
not_found              404     no such task, run, approval or route
method_not_allowed     405     the route exists, not with this method
invalid_request        422     the body, a parameter or an id is not valid
invalid_state          409     the task cannot do that now (retry a task that is done, ...)
already_answered       409     another client answered the approval first (or it was withdrawn)
payload_too_large      413     the request body is over the limit
store_busy             503     the store is locked by another writer: try again
store_error            500     the store failed
no_workspace           404     the task has no workspace (it runs in its directory, or it was removed)
checkpoint_not_found   404     the task's workspace has no such checkpoint
turn_not_found         404     the task has no such turn (run), or it took no checkpoint yet
not_a_git_repository   422     a worktree was asked for a directory outside any git repository
workspace_in_use       409     a run is using the workspace (rollback, commit, removal wait for it)
workspace_error        409     the workspace cannot do that as it is (its branch is gone, ...)
git_error              500     git failed on the workspace: the message says how
workspace_unavailable  503     git is not installed on the server, so there are no workspaces
internal_error         500     a bug: the message says what
=====================  ======  ==============================================================
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import OrchestrateError
from ..store import AlreadyAnsweredError, NotFoundError, StoreBusyError, StoreError
from ..workspace import GitError, NotAGitRepositoryError, WorkspaceError, WorkspaceInUseError

__all__ = ["CODES", "ApiError", "error_body", "error_response", "from_workspace", "install_handlers"]

_log = logging.getLogger("orchestrate.serve")

CODES: dict[str, int] = {
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "invalid_request": 422,
    "invalid_state": 409,
    "already_answered": 409,
    "payload_too_large": 413,
    "store_busy": 503,
    "store_error": 500,
    "no_workspace": 404,
    "checkpoint_not_found": 404,
    "turn_not_found": 404,
    "not_a_git_repository": 422,
    "workspace_in_use": 409,
    "workspace_error": 409,
    "git_error": 500,
    "workspace_unavailable": 503,
    "internal_error": 500,
}


class ApiError(Exception):
    """Raised by a route: answered as its code's status with a JSON body."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        assert code in CODES, code
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


def error_body(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **details}}


def error_response(code: str, message: str, **details: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="orchestrate"'} if code == "unauthorized" else None
    return JSONResponse(error_body(code, message, **details), status_code=CODES[code], headers=headers)


def _from_store(exc: StoreError) -> JSONResponse:
    if isinstance(exc, AlreadyAnsweredError):
        approval = exc.approval
        return error_response(
            "already_answered",
            str(exc),
            approval={
                "id": approval.id,
                "status": approval.status,
                "decision": approval.decision,
                "answered_by": approval.answered_by,
                "reason": approval.reason,
            },
        )
    if isinstance(exc, NotFoundError):
        return error_response("not_found", str(exc))
    if isinstance(exc, StoreBusyError):
        return error_response("store_busy", str(exc))
    if type(exc) is StoreError:
        # The store's plain refusals (retry a task that is done, an empty follow-up) are the caller's.
        return error_response("invalid_state", str(exc))
    return error_response("store_error", str(exc))


def from_workspace(exc: WorkspaceError | GitError) -> ApiError:
    """The workspace layer's refusals and failures, each with its code (the routes check the
    common cases, no workspace, no checkpoint, first; this is what is left)."""
    if isinstance(exc, WorkspaceInUseError):
        return ApiError("workspace_in_use", str(exc))
    if isinstance(exc, NotAGitRepositoryError):
        return ApiError("not_a_git_repository", str(exc))
    if isinstance(exc, GitError):
        if "not installed" in str(exc):
            return ApiError("workspace_unavailable", str(exc))
        return ApiError("git_error", str(exc))
    return ApiError("workspace_error", str(exc))


def install_handlers(app: FastAPI) -> None:
    """Every error the app can meet, as JSON with a stable code."""

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(exc.code, exc.message, **exc.details)

    async def store_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StoreError)
        return _from_store(exc)

    async def orchestrate_error(request: Request, exc: Exception) -> JSONResponse:
        return error_response("invalid_request", str(exc))

    async def workspace_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, WorkspaceError | GitError)
        err = from_workspace(exc)
        return error_response(err.code, err.message)

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        details = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in exc.errors()
        ]
        first = details[0] if details else {"loc": [], "msg": "invalid"}
        where = ".".join(str(p) for p in first["loc"])
        return error_response("invalid_request", f"{where}: {first['msg']}", details=details)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(
            exc.status_code, "invalid_request"
        )
        return error_response(code, str(exc.detail))

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        _log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response("internal_error", f"{type(exc).__name__}: {exc}")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StoreError, store_error)
    app.add_exception_handler(OrchestrateError, orchestrate_error)
    app.add_exception_handler(WorkspaceError, workspace_error)
    app.add_exception_handler(GitError, workspace_error)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
