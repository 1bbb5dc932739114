"""The command's cheap search for pydantic plugins (cli/pydantic_plugins.py) finds what pydantic's
own would, or hands over to it: a plugin installed is still loaded and called for our models, and
``PYDANTIC_DISABLE_PLUGINS`` still turns it off; where none is installed, ``importlib.metadata``
(and email, zipfile, csv ...) is never imported.  The searches are real: real directories of
``*.dist-info`` folders on ``sys.path``, and the real command in a fresh interpreter."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrate.cli import pydantic_plugins
from orchestrate.cli.pydantic_plugins import plugins_declared

from .helpers import ROOT

# A pydantic plugin that notes the name of every schema it is asked about, in $PLUGIN_SEEN.
PLUGIN = """
import os


class Plugin:
    def new_schema_validator(self, schema, schema_type, schema_type_path, schema_kind, config, settings):
        with open(os.environ["PLUGIN_SEEN"], "a") as f:
            f.write(schema_type_path.name + "\\n")
        return None, None, None


plugin = Plugin()
"""

# `orchestrate schema` (through the command's own entry point), then whether importlib.metadata
# was imported, on stderr.
COMMAND = """
import sys
from orchestrate.cli.early import main
sys.argv = ["orchestrate", "schema"]
try:
    main()
finally:
    print("METADATA" if "importlib.metadata" in sys.modules else "NO METADATA", file=sys.stderr)
"""


def distribution(root: Path, name: str, entry_points: str | None) -> Path:
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)
    return info


@pytest.fixture
def search_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``sys.path`` made of one directory holding two distributions that declare no pydantic
    plugin (one with other entry points), plus a path that does not exist."""
    site = tmp_path / "site"
    distribution(site, "plain", None)
    distribution(site, "tool", "[console_scripts]\ntool = tool:main\n")
    (site / "module.py").write_text("")
    monkeypatch.setattr(sys, "path", [str(site), str(tmp_path / "missing")])
    yield site


def test_no_plugin_declared(search_path: Path) -> None:
    assert plugins_declared() is False


def test_a_declared_plugin_is_found(search_path: Path) -> None:
    distribution(search_path, "logger", "[pydantic]\nlogger = logger:plugin\n")
    assert plugins_declared() is True


def test_an_egg_info_and_any_spelling_are_found(search_path: Path) -> None:
    info = search_path / "Old.EGG-INFO"
    info.mkdir()
    (info / "entry_points.txt").write_text("[ Pydantic ]\nold = old:plugin\n")
    assert plugins_declared() is True


def test_what_it_cannot_read_plainly_goes_to_the_exact_search(
    search_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zip on the path, an egg, a finder that lists distributions of its own: the answer is
    "maybe" (True), never a guess that would skip a plugin."""
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("inside-1.0.dist-info/entry_points.txt", "[pydantic]\nx = x:plugin\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(archive)])
    assert plugins_declared() is True

    monkeypatch.setattr(sys, "path", [str(search_path), str(tmp_path / "thing.egg")])
    (tmp_path / "thing.egg").mkdir()
    assert plugins_declared() is True

    class Finder:
        def find_spec(self, *args: object) -> None:
            return None

        def find_distributions(self, *args: object) -> list[object]:
            return []

    monkeypatch.setattr(sys, "path", [str(search_path)])
    assert plugins_declared() is False
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    assert plugins_declared() is True


def test_an_oversized_or_unreadable_entry_points_file(search_path: Path) -> None:
    big = distribution(search_path, "big", "[console_scripts]\n" + "x = y:z\n" * 200_000)
    assert (big / "entry_points.txt").stat().st_size > 1 << 20
    assert plugins_declared() is True  # not read whole: the exact search decides
    (big / "entry_points.txt").unlink()
    (big / "entry_points.txt").mkdir()  # what importlib.metadata skips, skipped too
    assert plugins_declared() is False


def test_the_stand_in_is_imported_once_and_gives_other_names_from_pydantic_s_loader() -> None:
    """Installed, nothing is in ``sys.modules`` until pydantic imports its loader; then the
    stand-in is, once; a name pydantic may import from it besides ``get_plugins`` comes from the
    real loader, which takes its place from then on."""
    name = pydantic_plugins.LOADER
    real = sys.modules.pop(name, None)
    meta_path = list(sys.meta_path)
    try:
        pydantic_plugins.install()
        pydantic_plugins.install()
        assert name not in sys.modules
        stand_in = importlib.import_module(name)
        assert stand_in.get_plugins is pydantic_plugins.get_plugins
        assert stand_in.__spec__ is not None and stand_in.__spec__.name == name
        assert sys.meta_path == meta_path  # stepped aside once imported
        assert importlib.import_module(name) is stand_in
        assert stand_in.PYDANTIC_ENTRY_POINT_GROUP == "pydantic"  # the real module's constant
        assert sys.modules[name] is not stand_in  # the real one in its place now
        assert sys.modules[name].get_plugins is not pydantic_plugins.get_plugins
        with pytest.raises(AttributeError):
            getattr(stand_in, "__path__")  # noqa: B009  # (a module, not a package, to the import system)
    finally:
        sys.meta_path[:] = meta_path
        if real is not None:
            sys.modules[name] = real


def run_command(tmp_path: Path, plugin: bool, **env: str) -> tuple[list[str], str]:
    """``orchestrate schema`` in a fresh interpreter, with a plugin installed or not: the schemas
    the plugin saw, and whether importlib.metadata was imported."""
    site = tmp_path / ("with" if plugin else "without")
    site.mkdir(parents=True)
    if plugin:
        (site / "seeing.py").write_text(PLUGIN)
        distribution(site, "seeing", "[pydantic]\nseeing = seeing:plugin\n")
    seen = tmp_path / f"seen-{plugin}-{sorted(env)}.txt"
    environ = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    environ.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]), PLUGIN_SEEN=str(seen), **env)
    proc = subprocess.run(
        [sys.executable, "-c", COMMAND],
        env=environ,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    json.loads(proc.stdout)  # the schema, whole
    names = seen.read_text().splitlines() if seen.exists() else []
    return names, proc.stderr.strip().splitlines()[-1]


def test_the_command_still_loads_an_installed_plugin(tmp_path: Path) -> None:
    names, metadata = run_command(tmp_path, plugin=True)
    assert "Task" in names, names  # pydantic's own loader found it, and it was called
    assert metadata == "METADATA"


def test_the_command_honours_pydantic_disable_plugins(tmp_path: Path) -> None:
    names, _ = run_command(tmp_path, plugin=True, PYDANTIC_DISABLE_PLUGINS="__all__")
    assert names == []
    names, _ = run_command(tmp_path / "by-name", plugin=True, PYDANTIC_DISABLE_PLUGINS="seeing")
    assert names == []  # (a list of names: pydantic's loader reads it)


def test_the_command_without_a_plugin_skips_importlib_metadata(tmp_path: Path) -> None:
    names, metadata = run_command(tmp_path, plugin=False)
    assert names == []
    assert metadata == "NO METADATA"
