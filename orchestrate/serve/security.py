"""The door: one ASGI middleware every request passes before any route sees it.

In order:

1. **Host**: the Host header must name this server (on a loopback bind: ``localhost``, ``127.0.0.1``
   or ``[::1]``, plus any configured names), so a page on another site cannot reach us through a DNS
   name rebound to 127.0.0.1.
2. **Origin**: a browser's ``Origin`` must be this server's own or a configured one.
3. **Token**: ``Authorization: Bearer TOKEN`` (boards, scripts), or the session cookie the board page
   gets by showing the token once (``POST /api/session``).  Nothing is exempt: an unknown route
   without a token is 401, not 404, so the route table is not revealed; a page path is answered 401
   with a small login page that holds no data.
4. **CSRF**: a state-changing request carried by the cookie must also carry ``X-Orchestrate-CSRF``
   (a custom header, which no other site can make a browser send without a CORS preflight we refuse),
   besides the cookie being ``SameSite=Strict``.  A bearer token is never sent by a browser on its
   own, so it needs no more.
5. **Size**: a body over the limit is refused with 413, by its Content-Length or as it streams in.

Every response gets a strict Content-Security-Policy and the usual hardening headers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable
from http.cookies import SimpleCookie

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import CODES, error_body

__all__ = ["COOKIE", "CSRF_HEADER", "Door", "session_value"]

COOKIE = "orchestrate_session"
CSRF_HEADER = "x-orchestrate-csrf"
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def session_value(token: str) -> str:
    """The cookie's value: derived from the token (so the cookie never is the token, and a new token
    ends every session)."""
    return hmac.new(token.encode(), b"orchestrate-session-v1", hashlib.sha256).hexdigest()


def csp(script_hashes: Iterable[str] = ()) -> str:
    scripts = " ".join(["'self'", *(f"'sha256-{h}'" for h in script_hashes)])
    return (
        f"default-src 'none'; script-src {scripts}; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


def script_hash(script: str) -> str:
    return base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


class Door:
    """The middleware; ``login_page`` (HTML bytes) answers a page path that has no token."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        hosts: Iterable[str] | None,
        origins: Iterable[str] = (),
        max_body: int,
        login_page: bytes,
        login_hashes: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.token = token.encode()
        self.session = session_value(token).encode()
        self.hosts = None if hosts is None else {h.lower() for h in hosts}
        self.origins = set(origins)
        self.max_body = max_body
        self.login_page = login_page
        self.headers = [
            (b"content-security-policy", csp(login_hashes).encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"no-referrer"),
            (b"cross-origin-opener-policy", b"same-origin"),
            (b"cross-origin-resource-policy", b"same-origin"),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        send = self._hardened(send, scope["path"])
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if self.hosts is not None and _host_name(host) not in self.hosts:
            await _refuse(send, "forbidden", f"this server does not answer to the host {host!r}")
            return
        origin = headers.get(b"origin")
        if origin is not None and not self._origin_ok(origin.decode("latin-1"), host):
            await _refuse(send, "forbidden", "cross-origin requests are not allowed")
            return
        how = self._authenticated(headers)
        if how is None:
            await self._unauthorized(scope, send)
            return
        if how == "cookie" and scope["method"] not in _SAFE and CSRF_HEADER.encode() not in headers:
            await _refuse(send, "forbidden", f"a state change by cookie needs the {CSRF_HEADER} header")
            return
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await _refuse(send, "payload_too_large", f"the body is limited to {self.max_body} bytes")
            return
        scope.setdefault("state", {})["auth"] = how
        body = await self._body(receive)
        if body is None:
            await _refuse(send, "payload_too_large", f"the body is limited to {self.max_body} bytes")
            return
        await self.app(scope, _replay(body, receive), send)

    def _origin_ok(self, origin: str, host: str) -> bool:
        if origin in self.origins:
            return True
        # Same origin: the browser's Origin names the host it asked (whatever the scheme a proxy adds).
        return origin.partition("://")[2].lower() == host

    def _authenticated(self, headers: dict[bytes, bytes]) -> str | None:
        auth = headers.get(b"authorization", b"")
        scheme, _, given = auth.partition(b" ")
        if scheme.lower() == b"bearer" and given and hmac.compare_digest(given.strip(), self.token):
            return "bearer"
        cookie = headers.get(b"cookie")
        if cookie:
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(cookie.decode("latin-1"))
            except Exception:  # a malformed Cookie header authenticates nothing
                return None
            morsel = jar.get(COOKIE)
            if morsel is not None and hmac.compare_digest(morsel.value.encode(), self.session):
                return "cookie"
        return None

    async def _unauthorized(self, scope: Scope, send: Send) -> None:
        path: str = scope["path"]
        if scope["method"] == "GET" and not path.startswith("/api/") and path != "/api":
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"text/html; charset=utf-8"),
                        (b"www-authenticate", b'Bearer realm="orchestrate"'),
                        (b"cache-control", b"no-store"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": self.login_page})
            return
        await _refuse(send, "unauthorized", "a token is required: Authorization: Bearer TOKEN")

    def _hardened(self, send: Send, path: str) -> Send:
        extra = self.headers

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in extra if k not in names]
                if b"cache-control" not in names:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        return wrapped

    async def _body(self, receive: Receive) -> bytes | None:
        """The whole body (bounded, so holding it is cheap), or None if it is over the limit; read
        here so a chunked body without a length is refused as surely as one with it."""
        parts: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(parts)  # the client went away: the app will see it
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_body:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the buffered body once, then waits on the real one (for disconnects)."""
    given = False

    async def wrapped() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return wrapped


def _headers(scope: Scope) -> dict[bytes, bytes]:
    # A repeated header keeps its first value: a second Authorization cannot override the first.
    out: dict[bytes, bytes] = {}
    for key, value in scope["headers"]:
        out.setdefault(key.lower(), value)
    return out


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def allowed_hosts(bind: str, loopback: bool, configured: Iterable[str]) -> set[str] | None:
    """Host names to accept (None: any; a token is still required)."""
    names = {h.lower() for h in configured}
    if loopback:
        return names | set(_LOOPBACK_NAMES) | {bind.lower() if ":" not in bind else f"[{bind}]"}
    if not names:
        return None
    return names | set(_LOOPBACK_NAMES) | {bind.lower()}


async def _refuse(send: Send, code: str, message: str) -> None:
    body = orjson.dumps(error_body(code, message))
    headers: list[tuple[bytes, bytes]] = [(b"content-type", b"application/json")]
    if code == "unauthorized":
        headers.append((b"www-authenticate", b'Bearer realm="orchestrate"'))
    await send({"type": "http.response.start", "status": CODES[code], "headers": headers})
    await send({"type": "http.response.body", "body": body})
