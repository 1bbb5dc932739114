"""A run's result is read off its entries in one pass by each entry's kind: the same tools, token
totals and last error as the straightforward reading, over every Claude and Codex fixture (tools,
usage, errors and all), with run errors added after them."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrate import Task, get_executor
from orchestrate.entries import ErrorEntry, TokenUsage, TokenUsageEntry, ToolUse
from orchestrate.replay import replay
from orchestrate.run import Run
from orchestrate.wire.notes import RunError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CASES = [
    ("claude-code", path)
    for path in sorted((FIXTURES / "claude-stream-json").glob("*.jsonl"))
    if not path.name.endswith(".entries.jsonl")
] + [("codex", path) for path in sorted((FIXTURES / "codex-app-server").glob("*.jsonl"))]


@pytest.mark.parametrize(("executor", "path"), CASES, ids=lambda c: c if isinstance(c, str) else c.stem)
def test_the_result_holds_every_tool_the_usage_totals_and_the_last_error(
    executor: str, path: Path, tmp_path: Path
) -> None:
    run = Run(get_executor(executor), Task(prompt="p", cwd=tmp_path, raw_log=tmp_path / "raw.jsonl"))
    for _ in replay(path, run.normalizer):
        pass
    run.normalizer.note(RunError("timeout", "first"))
    if "error" in path.stem:
        run.normalizer.note(RunError("process_exited", "the last one"))
    result = run._make_result()

    entries = run.normalizer.entries
    assert result.entries == entries
    assert result.tool_results == [e.type.tool for e in entries if isinstance(e.type, ToolUse)]
    errors = [e.type.error.message for e in entries if isinstance(e.type, ErrorEntry)]
    assert result.error == errors[-1] and result.error in ("first", "the last one")
    usages = [e.type.usage for e in entries if isinstance(e.type, TokenUsageEntry)]
    costs = [u.total_cost_usd for u in usages if u.total_cost_usd is not None]
    assert result.token_usage == TokenUsage(
        input_tokens=sum(u.input_tokens for u in usages),
        output_tokens=sum(u.output_tokens for u in usages),
        cache_read_tokens=sum(u.cache_read_tokens for u in usages),
        cache_write_tokens=sum(u.cache_write_tokens for u in usages),
        total_cost_usd=sum(costs) if costs else None,
        context_window=next((u.context_window for u in reversed(usages) if u.context_window), None),
    )


def test_the_fixtures_hold_what_the_result_reads() -> None:
    """The cases above are not vacuous: between them they hold tools, usage and errors."""
    kinds: set[str] = set()
    for executor, path in CASES:
        normalizer = get_executor(executor).create_normalizer()
        for _ in replay(path, normalizer):
            pass
        kinds.update(e.type.kind for e in normalizer.entries)
    assert {"tool_use", "token_usage", "error"} <= kinds
