"""The door of `orchestrate serve`: every route refuses a request without the token (the routes are
read from the app's own table, so a new route cannot forget), CSRF, foreign hosts and origins, body
limits, the token file, and the bind that is refused."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrate.executors.base import ExecutorOptions
from orchestrate.serve import ServeConfig, create_app
from orchestrate.serve.routes_tasks import SAFE_EXECUTOR_OPTIONS

from .helpers import ROOT
from .test_serve_api import Server, create, start_server
from .test_workspace_layer import make_repo

# A value for every path parameter the app has; a route with a parameter not here fails the test
# below, so whoever adds one decides what a valid value is.
PARAMS = {"task_id": "1", "run_id": "1", "approval_id": "1", "checkpoint": "1", "name": "board.js"}


def routes() -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, read from its route table."""
    app = create_app(ServeConfig(token="t" * 32))
    found: list[tuple[str, str]] = []

    def walk(table: list[Any]) -> None:
        for route in table:
            inner = getattr(route, "original_router", None)
            if inner is not None:
                walk(inner.routes)
            elif hasattr(route, "methods") and route.methods:
                found.extend((m, route.path) for m in sorted(route.methods) if m != "HEAD")

    walk(app.routes)
    return sorted(set(found))


ROUTES = routes()


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: PARAMS[m.group(1)], path)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("serve-sec") / "home", max_body=4096)
    yield s
    s.stop()


def test_the_route_table_is_all_there() -> None:
    paths = {p for _, p in ROUTES}
    assert {"/api/tasks", "/api/tasks/{task_id}/stream", "/api/stream", "/", "/api/openapi.json"} <= paths
    assert ("POST", "/api/approvals/{approval_id}") in ROUTES
    for _, path in ROUTES:
        concrete(path)  # KeyError: a new path parameter needs a value in PARAMS


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_every_route_refuses_a_request_without_the_token(server: Server, method: str, path: str) -> None:
    url = server.base + concrete(path)
    wrong = "x" * len(server.token)
    with httpx.Client(timeout=10) as c:
        for headers in (
            {},
            {"authorization": f"Bearer {wrong}"},
            {"authorization": f"Basic {server.token}"},
            {"authorization": "Bearer"},
            {"cookie": f"orchestrate_session={server.token}"},  # the token is not the cookie
            {"cookie": "orchestrate_session=0000"},
        ):
            r = c.request(method, url, headers=headers, json={} if method == "POST" else None)
            assert r.status_code == 401, (headers, r.text)
            assert r.headers["www-authenticate"].startswith("Bearer")
            if r.headers["content-type"].startswith("application/json"):
                assert r.json()["error"]["code"] == "unauthorized"
            else:  # a page: the sign-in page, which holds nothing of the store
                assert b"<form" in r.content and b"task" not in r.content.lower()


def test_an_unknown_route_is_401_before_404(server: Server) -> None:
    with httpx.Client(timeout=10) as c:
        assert c.get(server.base + "/api/nothing-here").status_code == 401
        assert c.post(server.base + "/api/tasks/1/launch-missiles").status_code == 401
    with server.client() as c:
        r = c.get("/api/nothing-here")
        assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
        r = c.delete("/api/tasks")
        assert (r.status_code, r.json()["error"]["code"]) == (405, "method_not_allowed")


def test_the_page_signs_in_with_a_cookie_that_needs_the_csrf_header(server: Server, tmp_path: Path) -> None:
    with server.client() as c:
        r = c.post("/api/session")
        assert r.status_code == 204
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        value = c.cookies["orchestrate_session"]
        assert server.token not in value
    jar = {"orchestrate_session": value}
    body = {"prompt": "plain", "executor": "claude-code", "cwd": str(tmp_path)}
    with httpx.Client(base_url=server.base, cookies=jar, timeout=10) as c:
        assert c.get("/api/tasks").status_code == 200  # reading by cookie is fine
        assert c.get("/").status_code == 200 and b"board.js" in c.get("/").content
        r = c.post("/api/tasks", json=body)  # a change by cookie alone: a forged form could do it
        assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")
        r = c.post("/api/tasks", json=body, headers={"x-orchestrate-csrf": "1"})
        assert r.status_code == 201
        # The cookie cannot trade itself for a new session: only the token opens one.
        assert c.post("/api/session", headers={"x-orchestrate-csrf": "1"}).status_code == 401


def test_foreign_hosts_and_origins_are_refused(server: Server) -> None:
    with server.client() as c:
        for host in ("evil.example", "127.0.0.1.evil.example", "localhost.evil.example:80"):
            r = c.get("/api/tasks", headers={"host": host})
            assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden"), host
        for origin in ("https://evil.example", "null", server.base.replace("127.0.0.1", "localhost:1")):
            r = c.get("/api/tasks", headers={"origin": origin})
            assert r.status_code == 403, origin
            assert "access-control-allow-origin" not in r.headers
        # A preflight from anywhere gets no CORS grant: none is configured.
        r = c.options(
            "/api/tasks",
            headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
        )
        assert r.status_code in (401, 403) and "access-control-allow-origin" not in r.headers
        assert c.get("/api/tasks", headers={"origin": server.base}).status_code == 200
        r = c.get("/api/tasks")
        assert "default-src 'none'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY" and r.headers["cache-control"] == "no-store"


def test_bodies_over_the_limit_are_refused(server: Server, tmp_path: Path) -> None:
    big = {"prompt": "x" * 5000, "executor": "claude-code", "cwd": str(tmp_path)}
    with server.client() as c:
        r = c.post("/api/tasks", json=big)
        assert (r.status_code, r.json()["error"]["code"]) == (413, "payload_too_large")

        def chunks() -> Iterator[bytes]:  # no Content-Length: chunked, counted as it comes
            yield b'{"prompt": "'
            for _ in range(10):
                yield b"y" * 1000
            yield b'"}'

        r = c.post("/api/tasks", content=chunks(), headers={"content-type": "application/json"})
        assert (r.status_code, r.json()["error"]["code"]) == (413, "payload_too_large")
        assert c.get("/api/tasks").status_code == 200  # the server is fine


def test_commands_and_roots_are_the_servers_to_allow(tmp_path: Path) -> None:
    outer = make_repo(tmp_path / "outer")  # a repository around the allowed directory
    root = outer / "work"
    root.mkdir()
    inner = make_repo(root / "inner")  # and one inside it
    s = start_server(
        tmp_path / "home",
        allow_commands=False,
        roots=[str(root)],
        worker=False,
        workspace_root=str(root / "workspaces"),
    )
    try:
        with s.client() as c:
            base = {"prompt": "plain", "executor": "claude-code", "cwd": str(root)}
            assert c.post("/api/tasks", json=base).status_code == 201
            outside = c.post("/api/tasks", json=base | {"cwd": str(tmp_path)})
            assert (outside.status_code, outside.json()["error"]["code"]) == (422, "invalid_request")
            link = root / "escape"
            link.symlink_to(tmp_path)
            assert c.post("/api/tasks", json=base | {"cwd": str(link)}).status_code == 422
            marker = tmp_path / "pwned"
            run_it = ["/bin/sh", "-c", f"touch {marker}"]
            for extra in (
                {"executor_options": {"base_command": run_it}},
                {"executor_options": {"env": {"LD_PRELOAD": "/tmp/x.so"}}},
                {"run_options": {"env": {"PATH": "/tmp"}}},
                # Each of these makes the CLI start a program of the client's choosing (found by an
                # adversarial review): an MCP server, Codex's -c pairs, and free CLI arguments such as
                # Claude's --settings with a SessionStart hook.
                {"executor": "codex", "executor_options": {"mcp_servers": {"x": {"command": run_it[0]}}}},
                {"executor": "codex", "executor_options": {"config": {"mcp_servers.x.command": run_it[0]}}},
                {"executor_options": {"extra_args": ["--settings", '{"hooks": {"SessionStart": []}}']}},
            ):
                r = c.post("/api/tasks", json=base | extra)
                assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden"), extra
            # An allowlist: every executor option but the few that name no program is refused, a new
            # option included; those few are accepted.
            for name, field in ExecutorOptions.model_fields.items():
                if name in SAFE_EXECUTOR_OPTIONS:
                    continue
                r = c.post("/api/tasks", json=base | {"executor_options": {name: _example(field.annotation)}})
                assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden"), name
            safe = {
                "model": "m",
                "permission_mode": "default",
                "sandbox": "read-only",
                "approval_policy": "never",
            }
            assert c.post("/api/tasks", json=base | {"executor_options": safe}).status_code == 201
            assert not marker.exists()
            # Workspaces: the setup command is a command; the worktree holds the whole repository, so
            # that must lie under the roots; where workspaces go is the server's alone.
            inside = base | {"cwd": str(inner), "workspace": "worktree"}
            assert c.post("/api/tasks", json=inside).status_code == 201
            for body, expected in (
                (inside | {"workspace_options": {"setup": "touch /tmp/pwned"}}, (403, "forbidden")),
                (base | {"workspace": "worktree"}, (422, "invalid_request")),  # the repository is outer
                (base | {"workspace": "copy"}, (422, "invalid_request")),  # the workspaces would be inside
                (inside | {"workspace_options": {"root": str(tmp_path)}}, (422, "invalid_request")),
                (base | {"run_options": {"workspace": "copy"}}, (422, "invalid_request")),
            ):
                r = c.post("/api/tasks", json=body)
                assert (r.status_code, r.json()["error"]["code"]) == expected, (body, r.text)
            assert (
                "outside the directories" in c.post("/api/tasks", json=base | {"workspace": "worktree"}).text
            )
            # A `.git` file under a root naming a repository outside them (found by an adversarial
            # review: the worktree checked out the outside repository's files).
            secret = make_repo(tmp_path / "secret")
            innocent = root / "innocent"
            innocent.mkdir()
            (innocent / ".git").write_text(f"gitdir: {secret / '.git'}\n")
            r = c.post("/api/tasks", json=base | {"cwd": str(innocent), "workspace": "worktree"})
            assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_request"), r.text
            assert "git directory" in r.text
    finally:
        s.stop()


def _example(annotation: Any) -> Any:
    """A value of an option's type that is not its default (to name the option in a request)."""
    text = str(annotation)
    if "dict[str, dict" in text:
        return {"x": {"command": "y"}}
    if "dict" in text:
        return {"x": "y"}
    if "list" in text:
        return ["x"]
    if "float" in text or "int" in text:
        return 1
    return "x"


def _serve(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    environ = os.environ | {"ORCHESTRATE_HOME": str(home), "PYTHONPATH": str(ROOT)} | (env or {})
    environ.pop("ORCHESTRATE_SERVE_TOKEN", None) if "ORCHESTRATE_SERVE_TOKEN" not in (env or {}) else None
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrate", "serve", "--no-worker", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=environ,
        cwd=ROOT,
    )


def test_the_token_is_made_once_0600_and_printed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tokens = []
    for _ in range(2):
        proc = _serve(home, "--port", "0")
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline().decode()
            lines.append(line)
            if line.startswith("board: ") or not line:
                break
        proc.terminate()
        proc.wait(15)
        proc.stdout.close()
        [board] = [line for line in lines if line.startswith("board: ")]
        tokens.append(board.strip().rpartition("#token=")[2])
    path = home / "serve-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tokens[0] == tokens[1] == path.read_text().strip() and len(tokens[0]) >= 32
    # A token file others may read is refused, as ssh refuses such a key.
    path.chmod(0o644)
    proc = _serve(home, "--port", "0")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode != 0 and b"chmod 600" in out


def test_a_non_loopback_bind_needs_a_configured_token(tmp_path: Path) -> None:
    proc = _serve(tmp_path / "home", "--host", "0.0.0.0", "--port", "0")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode != 0 and b"configure a token first" in out
    assert not (tmp_path / "home" / "serve-token").exists() or b"Uvicorn running" not in out
    # With one configured it starts (and is then asked for that token); it is stopped at once.
    env = {"ORCHESTRATE_SERVE_TOKEN": "configured-token-0123456789"}
    proc = _serve(tmp_path / "home2", "--host", "0.0.0.0", "--port", "0", env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    line = ""
    while time.monotonic() < deadline and not line.startswith("orchestrate serve on"):
        line = proc.stdout.readline().decode()
        if not line:
            break
    port = int(line.split()[3].rpartition(":")[2])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        with httpx.Client(timeout=10) as c:
            url = f"http://127.0.0.1:{port}/api/tasks"
            assert c.get(url).status_code == 401
            ok = c.get(url, headers={"authorization": "Bearer configured-token-0123456789"})
            assert ok.status_code == 200
    finally:
        proc.terminate()
        proc.wait(15)
        proc.stdout.close()


def test_openapi_is_generated_and_behind_the_door(server: Server, tmp_path: Path) -> None:
    with httpx.Client(timeout=10) as c:
        assert c.get(server.base + "/api/openapi.json").status_code == 401
    with server.client() as c:
        spec = c.get("/api/openapi.json").json()
        assert spec["openapi"].startswith("3.")
        api_paths = {p for _, p in ROUTES if p.startswith("/api/") and p != "/api/openapi.json"}
        assert api_paths == set(spec["paths"])
        create(c, "plain", tmp_path)  # the document describes a server that works
