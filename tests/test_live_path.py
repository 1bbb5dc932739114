"""The live path's per-line costs (issue 16 point 5: a live run within 1.3x of the pure normalizer):
the ACP driver is handed only the lines it acts on, not the streamed updates that are nearly every
line of a turn, and still sees those updates while it waits out a loaded session's replay."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from orchestrate import AutoApprove
from orchestrate.executors.acp import AcpExecutor
from orchestrate.executors.base import ExecutorOptions
from orchestrate.run.acp import AcpDriver
from orchestrate.wire.lines import WireLine

from .helpers import run_agent, texts
from .hostile import hostile

pytestmark = pytest.mark.anyio


@pytest.fixture
def driver_lines(monkeypatch: pytest.MonkeyPatch) -> list[WireLine]:
    """Every line the live ACP driver is handed, in order."""
    seen: list[WireLine] = []
    original = AcpDriver.on_line

    async def counting(self: AcpDriver, line: WireLine) -> None:
        seen.append(line)
        await original(self, line)

    monkeypatch.setattr(AcpDriver, "on_line", counting)
    return seen


async def test_streamed_updates_are_not_handed_to_the_acp_driver(
    tmp_path: Path, driver_lines: list[WireLine]
) -> None:
    result, _ = await run_agent(hostile("acp"), tmp_path, "deltas=3000 size=7")
    assert result.outcome == "success"
    assert texts(result, "assistant_message") == ["x" * 21000]  # every delta reached the entries
    methods = [line.object.get("method") for line in driver_lines if line.object is not None]
    assert "session/update" not in methods
    # What it acts on still comes: the answers to initialize, session/new and session/prompt.
    assert len([line for line in driver_lines if line.object and "result" in line.object]) == 3


async def test_the_agents_requests_still_reach_the_acp_driver(
    tmp_path: Path, driver_lines: list[WireLine]
) -> None:
    result, _ = await run_agent(hostile("acp"), tmp_path, "requests=40", AutoApprove())
    assert texts(result, "assistant_message") == ["40 of 40 requests answered"]
    methods = [line.object.get("method") for line in driver_lines if line.object is not None]
    assert methods.count("fs/read_text_file") == 40


# An ACP agent that replays a loaded session's history *after* its answer to session/load (as
# Gemini 0.61.0 does): one update every 0.1 s for 0.8 s.  Its answer to the prompt says how many
# it had sent when the prompt came.
_LATE_REPLAY = textwrap.dedent(
    """
    import json, sys, threading, time
    sent = {"n": 0}
    def send(obj):
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **obj}) + "\\n")
        sys.stdout.flush()
    def update(text):
        content = {"type": "text", "text": text}
        params = {"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk", "content": content}}
        send({"method": "session/update", "params": params})
    def replay():
        for i in range(8):
            time.sleep(0.1)
            update(f"old {i}. ")
            sent["n"] += 1
    threads = []
    for raw in sys.stdin:
        msg = json.loads(raw)
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}}})
        elif method == "session/load":
            send({"id": rid, "result": {}})
            threads.append(threading.Thread(target=replay))
            threads[-1].start()
        elif method == "session/prompt":
            update(f"the prompt came after {sent['n']} of 8 replayed updates")
            send({"id": rid, "result": {"stopReason": "end_turn"}})
        elif rid is not None:
            send({"id": rid, "result": {}})
    """
)


async def test_a_loaded_sessions_late_replay_is_still_waited_out(tmp_path: Path) -> None:
    script = tmp_path / "late_replay.py"
    script.write_text(_LATE_REPLAY)
    executor = AcpExecutor(ExecutorOptions(base_command=[sys.executable, str(script)]))
    result, _ = await run_agent(executor, tmp_path, "go", resume="s1")
    assert result.outcome == "success"
    assert "the prompt came after 8 of 8 replayed updates" in "".join(texts(result, "assistant_message"))


async def test_a_driver_that_reads_no_lines_is_not_asked_about_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cursor's and codex exec's driver answers nothing: the run hands the normalizer no per-line
    # question (keep=None), and every line still becomes what it always did.
    from orchestrate.normalizers.base import LineNormalizer
    from orchestrate.run.one_shot import PromptOnStdinDriver

    from .test_cursor import fake_cursor

    def asked(self: PromptOnStdinDriver, line: WireLine) -> bool:
        raise AssertionError("a driver that reads no lines was asked about one")

    keeps: list[object] = []
    feed_wire = LineNormalizer.feed_wire

    def spying(self: LineNormalizer, *args: Any, **kwargs: Any) -> Any:
        keeps.append(args[3] if len(args) > 3 else kwargs.get("keep"))
        return feed_wire(self, *args, **kwargs)

    monkeypatch.setattr(PromptOnStdinDriver, "wants", asked)
    monkeypatch.setattr(LineNormalizer, "feed_wire", spying)
    result, _ = await run_agent(fake_cursor(), tmp_path, "plain", AutoApprove())
    assert result.outcome == "success"
    assert texts(result, "assistant_message")  # the lines still made their entries
    assert keeps and all(keep is None for keep in keeps)
