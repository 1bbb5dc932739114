"""What the store keeps of a run's end, from its result: shared by the engine's runner and by the
recorder of `orchestrate run` (record.py), which must not import the runner (see __init__.py)."""

from __future__ import annotations

from ..run import RunResult
from ..store import RunEnd

__all__ = ["run_end"]


def run_end(result: RunResult | None, error: tuple[str, str] | None = None) -> RunEnd:
    """The stored columns of a run that ended with ``result`` (None: it never started, ``error``
    says why)."""
    if result is None:
        code, message = error or ("start_failed", "the run did not start")
        return RunEnd(status="failed", outcome="failed", error=message, error_code=code)
    usage = result.token_usage
    return RunEnd(
        status={"success": "done"}.get(result.outcome, result.outcome),
        outcome=result.outcome,
        exit_code=result.exit_code,
        error=result.error if result.outcome != "success" else None,
        error_code=None if result.outcome == "success" else result.outcome,
        session_id=result.session_id,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=usage.total_cost_usd,
    )
