"""The seed's JSON contract, exactly: what a TypeScript board written against agent-executor.d.ts
reads from our output.  The declarations in contract/orchestrate.d.ts are generated from the
pydantic models and type-checked against the seed with tsc (tests/data/check_seed.ts)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from orchestrate.approvals import ApprovalDecision
from orchestrate.contract import contract_json_schema, decision_from_json, decision_to_json
from orchestrate.contract.typescript import generate
from orchestrate.entries import CommandResult, EntryMetadata, NormalizedEntry, UserMessage
from orchestrate.registry import default_registry

from .helpers import FIXTURES, REQUIRE_REAL_CLIS, ROOT

CONTRACT = ROOT / "contract"
CHECK = Path(__file__).parent / "data" / "check_seed.ts"


def _tsc() -> str | None:
    local = CONTRACT / "node_modules" / ".bin" / "tsc"
    return str(local) if local.exists() else shutil.which("tsc")


def _golden_entries() -> list[dict[str, Any]]:
    return [e for f in sorted(FIXTURES.glob("*/*.entries.json")) for e in orjson.loads(f.read_bytes())]


def test_the_checked_in_declarations_are_what_the_models_generate() -> None:
    assert (CONTRACT / "orchestrate.d.ts").read_text() == generate(), (
        "regenerate: orchestrate schema --typescript > contract/orchestrate.d.ts"
    )


def test_schema_command_prints_the_declarations_and_the_contract() -> None:
    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrate", "schema", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    assert run("--typescript") == (CONTRACT / "orchestrate.d.ts").read_text()
    schema = orjson.loads(run("--contract"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema == orjson.loads(orjson.dumps(contract_json_schema()))


# Each way the contract could break, as (what the generated file says, what it would say then).
BROKEN = {
    "exit-code-optional": ("  exitCode: number;", "  exitCode?: number;"),
    "metadata-nested": ("  [key: string]: unknown;", "  extra?: Record<string, unknown>;"),
    "timed-out": ('  status: "timeout";', '  status: "timed_out";'),
    "protocol": ('"jsonl" | "custom"', '"jsonl" | "terminal"'),
}


@pytest.fixture(scope="module")
def tsc_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One tsc run over the generated declarations and each broken copy of them: the errors
    reported in each one's check file (by variant; "ok" is the generated file)."""
    tsc = _tsc()
    if tsc is None:
        if REQUIRE_REAL_CLIS:
            pytest.fail("tsc is not installed (.ci/install puts it in contract/node_modules)")
        pytest.skip("tsc is not installed (npm install --prefix contract)")
    work = tmp_path_factory.mktemp("tsc")
    # The seed is used as it was written (a declaration file, whose own imports and generics
    # `skipLibCheck` leaves alone); ours as .ts sources, so every line of them is checked.
    shutil.copy(CONTRACT / "agent-executor.d.ts", work / "seed.d.ts")
    ours = generate()
    variants = {"ok": ours}
    for name, (wrong, right) in BROKEN.items():
        assert wrong in ours, name
        variants[name] = ours.replace(wrong, right)
    files = []
    for name, text in variants.items():
        (work / f"ours_{name}.ts").write_text(text)
        (work / f"check_{name}.ts").write_text(CHECK.read_text().replace('"./ours"', f'"./ours_{name}"'))
        files.append(f"check_{name}.ts")
    options = ["--noEmit", "--strict", "--skipLibCheck", "--target", "es2022"]
    options += ["--module", "esnext", "--moduleResolution", "bundler"]
    done = subprocess.run(
        [tsc, *options, *files], cwd=work, capture_output=True, text=True, timeout=120, check=False
    )
    errors = dict.fromkeys(variants, "")
    for line in done.stdout.splitlines():
        for name in variants:
            if line.startswith((f"check_{name}.ts", f"ours_{name}.ts")):
                errors[name] += line + "\n"
    assert done.returncode == 0 or any(errors.values()), done.stdout + done.stderr
    return errors


def test_the_declarations_type_check_against_the_seed(tsc_errors: dict[str, str]) -> None:
    assert tsc_errors["ok"] == ""


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_the_type_check_fails_on_each_way_the_contract_could_break(
    tsc_errors: dict[str, str], variant: str
) -> None:
    assert "does not satisfy the constraint" in tsc_errors[variant]


def test_every_golden_entry_keeps_metadata_flat_and_camel_case() -> None:
    entries = _golden_entries()
    assert len(entries) > 300
    keys = {k for e in entries for k in (e.get("metadata") or {})}
    assert "extra" not in keys and {"sessionId", "model", "stopReason", "cwd"} <= keys
    assert not [k for k in keys if "_" in k.strip("_")], "snake_case metadata keys"


def test_every_command_result_has_an_exit_code() -> None:
    results = [
        e["type"]["tool"]["action"]["result"]
        for e in _golden_entries()
        if e["type"]["kind"] == "tool_use"
        and "result" in e["type"]["tool"]["action"]
        and e["type"]["tool"]["action"]["kind"] == "command_run"
    ]
    assert len(results) >= 8
    assert all(isinstance(r.get("exitCode"), int) for r in results)
    assert CommandResult(stdout="partial").to_json_dict() == {"exitCode": -1, "stdout": "partial"}


def test_metadata_round_trips_and_reads_runs_stored_nested() -> None:
    meta = EntryMetadata(session_id="s", model="m", extra={"stopReason": "end_turn", "cwd": "/w"})
    entry = NormalizedEntry(index=0, type=UserMessage(), content="hi", metadata=meta)
    data = entry.to_json_dict()
    assert data["metadata"] == {"sessionId": "s", "model": "m", "stopReason": "end_turn", "cwd": "/w"}
    assert NormalizedEntry.model_validate(data) == entry
    old = {"sessionId": "s", "model": "m", "extra": {"stop_reason": "end_turn", "cwd": "/w"}}
    assert EntryMetadata.model_validate(old) == meta
    # A standard key wins over an extra key of the same name; an agent's own "extra" key survives.
    clash = EntryMetadata(session_id="s", extra={"sessionId": "other", "extra": 1}).to_json_dict()
    assert clash == {"sessionId": "s", "extra": 1}


def test_approval_decisions_in_the_seeds_form() -> None:
    assert decision_to_json(ApprovalDecision.timed_out(5)) == {
        "status": "timeout",
        "reason": "no approval decision within 5 s",
    }
    assert decision_to_json(ApprovalDecision.deny("no")) == {
        "status": "denied",
        "reason": "no",
        "interrupt": False,
    }
    assert decision_to_json(ApprovalDecision.approve())["status"] == "approved"
    back = ApprovalDecision(**decision_from_json({"status": "timeout"}))
    assert back.status == "timed_out" and back.interrupt
    assert ApprovalDecision(**decision_from_json({"status": "denied", "reason": "x"})).reason == "x"
    with pytest.raises(ValueError):
        decision_from_json({"status": "maybe"})


def test_every_executors_capabilities_name_a_seed_protocol() -> None:
    protocols = {}
    for name in default_registry.names():
        caps = default_registry.get(name).capabilities.to_json_dict()
        assert caps["protocol"] in ("acp", "jsonrpc", "stream-json", "jsonl", "custom"), name
        protocols[name] = (caps["protocol"], caps.get("wireProtocol"))
    assert protocols["claude-code"] == ("stream-json", None)
    assert ("custom", "terminal") in protocols.values()
