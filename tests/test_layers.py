"""The layering of DESIGN.md: data flows down the layers and no layer imports one above it."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import orchestrate

from .helpers import ROOT

PACKAGE = Path(orchestrate.__file__).parent
BASE = {"errors", "entries", "task", "contract", "lazy"}
ALLOWED: dict[str, set[str]] = {
    "process": {"errors", "process"},
    # Each protocol's bytes framed and parsed once, for the peers and the normalizers alike.
    "wire": {"errors", "wire"},
    "normalizers": {"errors", "entries", "wire", "normalizers"},
    # The JSON contract: the entries plus the seed's other data shapes; nothing above them.
    "contract": {"errors", "entries", "contract"},
    "peers": {"errors", "entries", "wire", "peers"},
    "approvals": {"errors", "lazy", "approvals"},
    "executors": BASE | {"process", "wire", "normalizers", "peers", "approvals", "executors"},
    "run": BASE | {"process", "wire", "normalizers", "peers", "approvals", "executors", "run"},
    # The store keeps records and events; it knows no agent, so it sits above the run only by rank.
    # Workspaces know nothing of agents: git, files and the process layer at most.
    "workspace": BASE | {"process", "workspace"},
    "store": BASE | {"store"},
    "engine": BASE
    | {
        "process",
        "wire",
        "normalizers",
        "peers",
        "approvals",
        "executors",
        "run",
        "registry",
        "workspace",
        "store",
        "engine",
        "replay",  # a run's entries rebuilt from its raw log: the same replay as `orchestrate replay`
    },
    # The HTTP face: everything below it, never the CLI.
    "serve": BASE
    | {
        "process",
        "wire",
        "normalizers",
        "peers",
        "approvals",
        "executors",
        "run",
        "registry",
        "workspace",
        "store",
        "engine",
        "serve",
    },
}


def orchestrate_imports(path: Path) -> set[str]:
    """Top-level orchestrate subpackages/modules that ``path`` imports."""
    module_parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module_parts[: len(module_parts) - node.level]
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            if target and target[0] == "orchestrate" and len(target) > 1:
                found.add(target[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "orchestrate" and len(parts) > 1:
                    found.add(parts[1])
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_no_layer_imports_one_above_it(layer: str) -> None:
    for path in (PACKAGE / layer).rglob("*.py"):
        bad = orchestrate_imports(path) - ALLOWED[layer]
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_normalizers_are_sans_io() -> None:
    for path in [*(PACKAGE / "normalizers").rglob("*.py"), *(PACKAGE / "wire").rglob("*.py")]:
        text = path.read_text()
        for banned in (
            r"import anyio",
            r"import subprocess",
            r"time\.time\(",
            r"datetime\.now\(",
            r"(?<![\w.])open\(",
        ):
            assert not re.search(banned, text), f"{path.name} uses {banned}"


def test_every_public_name_is_exported() -> None:
    for name in orchestrate.__all__:
        assert hasattr(orchestrate, name), name
    for info in pkgutil.walk_packages(orchestrate.__path__, "orchestrate."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", []):
            assert hasattr(module, name), f"{info.name}.__all__ names missing {name}"


def test_lint_and_types_are_clean() -> None:
    ruff = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert ruff.returncode == 0, ruff.stdout
    fmt = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert fmt.returncode == 0, fmt.stdout
    mypy = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert mypy.returncode == 0, mypy.stdout
