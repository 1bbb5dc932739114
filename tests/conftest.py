from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _terminal_size_from_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest-xdist's workers export COLUMNS=80 and LINES=24 (for their own report lines), and Rich
    # and the CLIs take those over the size of the pseudo-terminal a test gives them: the live
    # view's tests would see a 100-column screen drawn 80 wide.  A person's terminal exports neither.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Raw logs of test runs go to the test's own directory, never to ~/.orchestrate.
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "orchestrate-home"))


@pytest.fixture(autouse=True)
def _no_warm_server(monkeypatch: pytest.MonkeyPatch) -> None:
    # A warm server someone runs on this machine (`orchestrate warm`, cli/warm.py) would be handed
    # every `orchestrate run` the tests start: the code it loaded, not the checkout's.  The tests of
    # the warm path (tests/test_warm.py) start their own, on a socket of their own.
    monkeypatch.setenv("ORCHESTRATE_WARM", "0")


@pytest.fixture(autouse=True)
def _no_code_cache_in_here(monkeypatch: pytest.MonkeyPatch) -> None:
    # The command's stand-ins for dataclasses' exec and typing's compile (cli/code_cache.py) are
    # for the command's process: tests that call cli/early.py's main() in this one would install
    # them for the whole session and, at its exit, write the test classes' codes to the checkout's
    # cache in place of the command's.  tests/test_code_cache*.py try them in fresh interpreters.
    from orchestrate.cli import code_cache

    monkeypatch.setattr(code_cache, "install", lambda: None)


@pytest.fixture
def fresh_code_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """cli/code_cache.py's state as if this process had installed it, empty (install() itself is
    never called in here: see above), for the tests that drive its functions directly."""
    import os
    import sys

    from orchestrate.cli import code_cache

    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(code_cache, "_installed", [os.getpid()])
    monkeypatch.setattr(code_cache, "_codes", {})
    monkeypatch.setattr(code_cache, "_new", {})
    monkeypatch.setattr(code_cache, "_used", set())
    monkeypatch.setattr(code_cache, "_counts", {"hits": 0, "misses": 0})


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- servers for the Postgres and Temporal tests (tests/services.py) --------------------------------


@pytest.fixture(scope="session")
def _postgres_session() -> Iterator[object]:
    from .services import postgres_server

    with postgres_server() as server:
        yield server


@pytest.fixture
def postgres(_postgres_session: object) -> object:
    """A throwaway Postgres cluster for the session (skips, or fails under CI, without one)."""
    from .services import unavailable

    if isinstance(_postgres_session, str):
        unavailable(_postgres_session)
    return _postgres_session


@pytest.fixture(scope="session")
def _temporal_session() -> Iterator[object]:
    from .services import temporal_server

    with temporal_server() as server:
        yield server


@pytest.fixture
def temporal(_temporal_session: object) -> object:
    """A Temporal dev server for the session (skips, or fails under CI, without one)."""
    from .services import unavailable

    if isinstance(_temporal_session, str):
        unavailable(_temporal_session)
    return _temporal_session


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store's URL on SQLite, then on the session's Postgres: the test runs on both (a test file
    with its own ``url`` fixture keeps its own)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    server = request.getfixturevalue("postgres")
    return str(server.database())  # type: ignore[attr-defined]


@pytest.fixture
def cluster(postgres: object, temporal: object, tmp_path: Path) -> Iterator[object]:
    """A Temporal test's store, names and workers (tests/temporal_cluster.py); the workers' logs are
    printed at the end, for a failure's report."""
    from .services import Postgres, Temporal
    from .temporal_cluster import Cluster

    assert isinstance(postgres, Postgres) and isinstance(temporal, Temporal)
    c = Cluster(postgres.database(), temporal, tmp_path)
    try:
        yield c
    finally:
        c.stop()
        for name in c.workers:
            print(f"--- {name}\n{c.log(name)[-3000:]}")
