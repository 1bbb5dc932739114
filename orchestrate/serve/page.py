"""The board page: plain HTML, JavaScript and CSS shipped in the package (``static/``), served as
they are, so nobody needs a build step.  The files are read once; a name outside the fixed set is
404 (no path from the request ever reaches the filesystem)."""

from __future__ import annotations

import re
from importlib import resources

from fastapi import APIRouter, Response
from fastapi.responses import HTMLResponse

from .errors import ApiError
from .security import script_hash

__all__ = ["LOGIN_HASHES", "LOGIN_PAGE", "router"]

_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}
_FILES = {
    p.name: p.read_bytes()
    for p in resources.files(__package__).joinpath("static").iterdir()
    if p.is_file() and p.name[0] != "." and p.name.rpartition(".")[2] in ("js", "css", "svg")
}
_INDEX = resources.files(__package__).joinpath("static", "index.html").read_bytes()
LOGIN_PAGE = resources.files(__package__).joinpath("static", "login.html").read_bytes()
LOGIN_HASHES = [script_hash(s) for s in re.findall(r"<script>(.*?)</script>", LOGIN_PAGE.decode(), re.DOTALL)]

router = APIRouter(include_in_schema=False)


@router.get("/")
async def index() -> HTMLResponse:
    return HTMLResponse(_INDEX)


@router.get("/static/{name}")
async def static(name: str) -> Response:
    body = _FILES.get(name)
    if body is None:
        raise ApiError("not_found", f"no file {name!r}")
    kind = _TYPES["." + name.rpartition(".")[2]]
    return Response(body, media_type=kind, headers={"cache-control": "no-cache"})
