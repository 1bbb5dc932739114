"""ACP 1.x as a client should speak it, end to end against the fake ACP agent in its 1.x mode
(FAKE_ACP_V1=1): resume over load, the model through session config options, session close, usage
and cost, quiet state entries, a message sent twice shown once, elicitation, $/cancel_request, and
an agent that never exits on end of input."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from orchestrate import ApprovalDecision, ApprovalRequest, AutoApprove, AutoDeny
from orchestrate.executors.acp import AcpExecutor
from orchestrate.executors.base import ExecutorOptions
from orchestrate.process.rawlog import read_raw_log
from orchestrate.run import RunResult
from orchestrate.run.acp_sessions import SessionsUnsupportedError, list_sessions

from .helpers import FAKE_ACP, Never, run_agent, texts, wait_for

pytestmark = pytest.mark.anyio


class _V1(AcpExecutor):
    name = "acp"


class _Lingering(AcpExecutor):
    """An ACP agent that stays alive when its input closes (Zed's adapters)."""

    name = "acp"
    exits_at_end_of_input = False


def agent(cls: type[AcpExecutor] = _V1, **env: str) -> AcpExecutor:
    return cls(ExecutorOptions(base_command=[sys.executable, str(FAKE_ACP)], env={"FAKE_ACP_V1": "1", **env}))


def sent(result: RunResult) -> list[dict[str, Any]]:
    """Every JSON-RPC message the client wrote, in order."""
    assert result.raw_log is not None
    _, records = read_raw_log(result.raw_log)
    out = []
    for rec in records:
        if rec.stream == "stdin":
            out += [orjson.loads(line) for line in rec.data.splitlines() if line.strip()]
    return out


def methods(result: RunResult) -> list[str]:
    return [m["method"] for m in sent(result) if "method" in m]


async def test_resume_is_preferred_and_replays_nothing(tmp_path: Path) -> None:
    result, _ = await run_agent(agent(), tmp_path, "plain", resume="sess_earlier")
    assert "session/resume" in methods(result) and "session/load" not in methods(result)
    assert result.session_id == "sess_earlier" and result.final_text == "hello from fake acp"
    assert not [e for e in result.entries if (e.metadata.extra or {}).get("history")]


async def test_load_replays_history_as_history_not_as_new_messages(tmp_path: Path) -> None:
    # Without FAKE_ACP_V1 the fake offers loadSession only: the history comes back as updates.
    result, _ = await run_agent(
        AcpExecutor(ExecutorOptions(base_command=[sys.executable, str(FAKE_ACP)])),
        tmp_path,
        "plain",
        resume="sess_earlier",
    )
    assert "session/load" in methods(result)
    history = [e for e in result.entries if (e.metadata.extra or {}).get("history")]
    [entry] = history
    assert entry.type.kind == "system_message"
    assert "**User:** earlier question" in entry.content and "**Assistant:** earlier answer" in entry.content
    # Not as new entries: the only user message is this run's prompt, the only answer this turn's.
    assert texts(result, "user_message") == ["plain"]
    assert texts(result, "assistant_message") == ["hello from fake acp"]
    assert "earlier" not in result.final_text


async def test_the_model_is_chosen_through_the_session_config_option(tmp_path: Path) -> None:
    result, _ = await run_agent(agent(), tmp_path, "model?", model="smart")
    assert result.final_text == "model=smart"
    [call] = [m for m in sent(result) if m.get("method") == "session/set_config_option"]
    assert call["params"]["configId"] == "model" and call["params"]["value"] == "smart"
    assert "Set model to smart" in texts(result, "system_message")


async def test_set_model_is_the_fallback_for_agents_that_list_models(tmp_path: Path) -> None:
    result, _ = await run_agent(agent(FAKE_ACP_MODELS="1"), tmp_path, "model?", model="smart")
    assert result.final_text == "model=smart"
    assert "session/set_model" in methods(result) and "session/set_config_option" not in methods(result)


async def test_a_model_the_agent_offers_no_way_to_choose_is_said_not_dropped(tmp_path: Path) -> None:
    plain = AcpExecutor(ExecutorOptions(base_command=[sys.executable, str(FAKE_ACP)]))
    result, _ = await run_agent(plain, tmp_path, "plain", model="smart")
    assert any(e.type.kind == "error" and "'smart' was not set" in e.content for e in result.entries)
    assert result.final_text == "hello from fake acp"


async def test_the_session_is_closed_at_the_end(tmp_path: Path) -> None:
    result, _ = await run_agent(agent(), tmp_path, "plain")
    assert methods(result)[-1] == "session/close"
    assert result.outcome == "success" and result.exit_code == 0


async def test_an_agent_that_never_exits_is_stopped_and_that_is_no_failure(tmp_path: Path) -> None:
    started = time.monotonic()
    result, _ = await run_agent(agent(_Lingering, FAKE_ACP_LINGER="1"), tmp_path, "plain")
    assert time.monotonic() - started < 6  # a second's grace, not the whole shutdown ladder
    assert result.outcome == "success" and result.error is None
    assert result.exit_code is not None and result.exit_code != 0  # it was signalled: say so, honestly
    assert any("stays alive when its input closes" in e.content for e in result.entries)
    assert "session/close" in methods(result)


async def test_the_same_lingering_agent_without_the_flag_waits_for_the_ladder(tmp_path: Path) -> None:
    # The flag is what saves the time: a generic executor meets the ladder (stdin grace, SIGTERM).
    result, _ = await run_agent(agent(FAKE_ACP_LINGER="1"), tmp_path, "plain")
    assert result.outcome == "success"
    assert not any("stays alive" in e.content for e in result.entries)


async def test_usage_update_and_prompt_usage_become_the_turns_token_usage(tmp_path: Path) -> None:
    async def twice(run: Any) -> None:
        await wait_for(run, lambda e: e.type.kind == "token_usage")
        await run.send_message("usage again")
        await wait_for(run, lambda e: e.type.kind == "token_usage")
        await run.end_input()

    result, _ = await run_agent(agent(), tmp_path, "usage", during=twice, keep_open=True)
    usages = [e.type.usage for e in result.entries if e.type.kind == "token_usage"]
    assert len(usages) == 2
    assert [u.context_window for u in usages] == [200000, 200000]
    # The agent reports the session's cost so far; each turn gets its own part of it.
    assert [u.total_cost_usd for u in usages] == [pytest.approx(0.25), pytest.approx(0.25)]
    assert (usages[0].input_tokens, usages[0].output_tokens) == (10, 5)
    assert result.token_usage.total_cost_usd == pytest.approx(0.5)
    assert not [e for e in result.entries if "usage" in e.content.lower() and e.type.kind == "system_message"]


async def test_a_message_sent_as_deltas_then_whole_is_shown_once(tmp_path: Path) -> None:
    result, _ = await run_agent(agent(), tmp_path, "deltas-whole")
    assert texts(result, "assistant_message") == ["Hello world", "Second."]


async def test_state_updates_are_quiet_and_do_not_split_the_message(tmp_path: Path) -> None:
    result, _ = await run_agent(agent(), tmp_path, "info")
    assert texts(result, "assistant_message") == ["before after"]
    system = texts(result, "system_message")
    assert "Session title: A better title" in system and "Session title: A title" not in system
    assert sum(t.startswith("Mode: ") for t in system) == 1 and "Mode: default" in system
    assert "Settings: Model: fast" in system


class Answers:
    def __init__(self, decision: ApprovalDecision) -> None:
        self.decision = decision
        self.asked: list[ApprovalRequest] = []

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        return self.decision


@pytest.mark.parametrize(
    ("decision", "answer", "shown"),
    [
        (
            ApprovalDecision.approve({"name": "Ada", "extra": {"not": "primitive"}}),
            {"action": "accept", "content": {"count": 3, "name": "Ada"}},  # the default filled in
            "answered",
        ),
        (ApprovalDecision.approve(), {"action": "decline"}, "declined"),  # no name: never made up
        (ApprovalDecision.deny("no"), {"action": "decline"}, "declined"),
    ],
)
async def test_elicitation_is_put_to_the_person(
    tmp_path: Path, decision: ApprovalDecision, answer: dict[str, Any], shown: str
) -> None:
    person = Answers(decision)
    result, _ = await run_agent(agent(), tmp_path, "elicit", person)
    [asked] = person.asked
    assert asked.tool_name == "elicitation" and asked.context == "Which name?"
    assert result.final_text == "elicitation: " + json.dumps(answer, sort_keys=True)
    assert f"The agent asks: Which name?: {shown}" in texts(result, "system_message")


async def test_an_elicitation_nobody_answers_in_time_is_cancelled(tmp_path: Path) -> None:
    result, _ = await run_agent(agent(), tmp_path, "elicit-url", Never(), approval_timeout=0.3)
    assert result.final_text == 'elicitation: {"action": "cancel"}'


async def test_an_elicitation_the_agent_takes_back_gets_cancel_not_silence(tmp_path: Path) -> None:
    result, _ = await run_agent(agent(), tmp_path, "elicit-takeback", Never())
    assert result.final_text == 'elicitation: {"action": "cancel"}'


async def test_an_elicitation_open_at_interrupt_is_answered_cancel(tmp_path: Path) -> None:
    async def interrupt(run: Any) -> None:
        with anyio.fail_after(10):
            async for patch in run.patches():
                if patch.entry.content.startswith("The agent asks"):
                    break
        await run.interrupt()

    result, _ = await run_agent(agent(), tmp_path, "elicit", Never(), during=interrupt)
    answers = [m for m in sent(result) if m.get("result") == {"action": "cancel"}]
    assert len(answers) == 1


async def test_approvals_are_unchanged_by_the_1x_additions(tmp_path: Path) -> None:
    approved, _ = await run_agent(agent(), tmp_path, "permission", AutoApprove())
    denied, _ = await run_agent(agent(), tmp_path, "permission", AutoDeny("no"))
    assert approved.tool_results[0].status == "success" and denied.tool_results[0].status == "denied"


async def test_session_list_pages_through_the_agents_sessions(tmp_path: Path) -> None:
    with anyio.fail_after(20):
        sessions = await list_sessions(agent(_Lingering, FAKE_ACP_LINGER="1"), tmp_path)
    assert [(s["sessionId"], s["cwd"]) for s in sessions] == [
        ("sess_old", str(tmp_path)),
        ("sess_older", str(tmp_path)),
    ]


async def test_session_list_from_an_agent_that_does_not_offer_it_says_so(tmp_path: Path) -> None:
    plain = AcpExecutor(ExecutorOptions(base_command=[sys.executable, str(FAKE_ACP)]))
    with anyio.fail_after(20), pytest.raises(SessionsUnsupportedError):
        await list_sessions(plain, tmp_path)
