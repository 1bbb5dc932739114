from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Raw logs of test runs go to the test's own directory, never to ~/.orchestrate.
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "orchestrate-home"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
