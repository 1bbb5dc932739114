"""The upgrade path: bump a pinned CLI, re-record its fixtures, and show how the normalized entries
changed, so a CLI release that changes its output is seen before users meet it."""

from __future__ import annotations

import difflib
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson

from ..errors import ConfigError
from ..registry import default_registry
from .recording import FIXTURE_FOLDERS, record_case

__all__ = ["CaseChange", "comparable", "install_pin", "rerecord", "upgrade"]

# What differs on every run and says nothing about the CLI's output format.
_VOLATILE_KEYS = {"timestamp", "durationMs", "duration_ms", "ts"}
_VOLATILE_TEXT = re.compile(r"(PGID: |cc-socks/|pid\"?: ?)\d+")


@dataclass
class CaseChange:
    case: str
    outcome: str
    diff: str  # empty: unchanged

    @property
    def changed(self) -> bool:
        return bool(self.diff)


def comparable(entries: Any) -> Any:
    """Entries with what changes on every run (times, durations, process ids) taken out."""
    if isinstance(entries, dict):
        return {k: comparable(v) for k, v in entries.items() if k not in _VOLATILE_KEYS}
    if isinstance(entries, list):
        return [comparable(v) for v in entries]
    if isinstance(entries, str):
        return _VOLATILE_TEXT.sub(r"\g<1>N", entries)
    return entries


def _lines(entries: Any) -> list[str]:
    return [orjson.dumps(e, option=orjson.OPT_SORT_KEYS).decode() + "\n" for e in comparable(entries)]


def install_pin(executor: str, version: str, pins: Path) -> tuple[str | None, str]:
    """Pin ``executor``'s npm package at ``version`` in ``pins``/package.json and install it;
    returns (old, new) versions."""
    package = default_registry.get(executor).npm_package
    if not package:
        raise ConfigError(f"{executor} has no npm package to upgrade")
    manifest = pins / "package.json"
    old = orjson.loads(manifest.read_bytes()).get("dependencies", {}).get(package)
    done = subprocess.run(
        [
            "npm",
            "install",
            "--prefix",
            str(pins),
            "--save-exact",
            "--no-audit",
            "--no-fund",
            f"{package}@{version}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise ConfigError(f"npm could not install {package}@{version}: {done.stderr.strip()[-500:]}")
    new = orjson.loads(manifest.read_bytes())["dependencies"][package]
    return old, new


async def rerecord(executor: str, fixtures: Path, project: Path | None = None) -> list[CaseChange]:
    """Re-record every case of ``executor`` under ``fixtures`` and diff the entries against before."""
    folder = fixtures / FIXTURE_FOLDERS.get(executor, executor)
    changes = []
    for scenario in sorted((fixtures / "scenarios" / executor).glob("*.*")):
        fixture = folder / f"{scenario.stem}.jsonl"
        expected = fixture.with_suffix(".entries.json")
        before = orjson.loads(expected.read_bytes()) if expected.exists() else []
        result = await record_case(executor, scenario, fixture, project=project)
        after = orjson.loads(expected.read_bytes())
        diff = "".join(
            difflib.unified_diff(
                _lines(before), _lines(after), f"{scenario.stem} before", f"{scenario.stem} after", n=1
            )
        )
        changes.append(CaseChange(scenario.stem, result.outcome, diff))
    return changes


def upgrade(
    executor: str, version: str | None, pins: Path, fixtures: Path, project: Path | None = None
) -> tuple[tuple[str | None, str] | None, list[CaseChange]]:
    """Bump (unless ``version`` is None), then re-record and compare."""
    bumped = install_pin(executor, version, pins) if version is not None else None
    return bumped, anyio.run(rerecord, executor, fixtures, project)
