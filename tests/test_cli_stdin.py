"""A prompt or message given as `-` is read from stdin up to a bound: a stream that never ends
(`yes | orchestrate send 1 -`) is a usage error, not our memory filled."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrate.cli import main as cli_main
from orchestrate.cli import options


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "-e", "claude-code", "-"],
        ["send", "1", "-"],
        ["interrupt", "1", "-"],
        ["run", "-e", "claude-code", "--approvals", "deny", "-"],
    ],
)
def test_text_on_stdin_past_the_bound_is_a_usage_error(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(options, "MAX_STDIN_CHARS", 1000)
    store = ["--store", f"sqlite:///{tmp_path / 'store.db'}"] if args[0] != "run" else []
    result = CliRunner().invoke(cli_main.main, [*args, *store], input="y\n" * 600)
    assert result.exit_code == 2, result.output
    assert "longer than 1,000 characters" in result.output


def test_text_within_the_bound_is_taken_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(options, "MAX_STDIN_CHARS", 1000)
    store = ["--store", f"sqlite:///{tmp_path / 'store.db'}"]
    result = CliRunner().invoke(cli_main.main, ["submit", "-e", "claude-code", "-", *store], input="y" * 1000)
    assert result.exit_code == 0, result.output
    shown = CliRunner().invoke(cli_main.main, ["show", result.output.strip(), "--json", *store])
    assert ("y" * 1000) in shown.output
