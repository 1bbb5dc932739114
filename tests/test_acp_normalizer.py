"""The ACP normalizer on edge cases, hand-written lines in both directions (the recorded fixtures
are in test_golden.py; the live client in test_acp_v1.py and test_run_fake_acp.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrate.entries import CommandRun, Plan, ToolUse
from orchestrate.normalizers.acp import AcpNormalizer

from .test_claude_normalizer import assert_freed_without_the_collector


def line(obj: Any) -> bytes:
    return (obj if isinstance(obj, bytes) else orjson.dumps({"jsonrpc": "2.0", **obj})) + b"\n"


class Talk:
    """Feeds a conversation: ``us`` what the client writes, ``agent`` what the agent prints."""

    def __init__(self) -> None:
        self.n = AcpNormalizer()

    def us(self, **obj: Any) -> Talk:
        self.n.feed(line(obj), "stdin")
        return self

    def agent(self, *objs: Any) -> Talk:
        self.n.feed(b"".join(line(o) for o in objs), "stdout")
        return self

    def update(self, update_kind: str, /, **fields: Any) -> Talk:
        return self.agent(
            {
                "method": "session/update",
                "params": {"sessionId": "s", "update": {"sessionUpdate": update_kind, **fields}},
            }
        )

    def chunk(self, piece: str, kind: str = "agent_message_chunk", **fields: Any) -> Talk:
        return self.update(kind, content={"type": "text", "text": piece}, **fields)

    def prompt(self, rid: int = 3, text: str = "go") -> Talk:
        return self.us(
            id=rid,
            method="session/prompt",
            params={"sessionId": "s", "prompt": [{"type": "text", "text": text}]},
        )

    def done(self, rid: int = 3, **result: Any) -> Talk:
        return self.agent({"id": rid, "result": {"stopReason": "end_turn", **result}})

    def finish(self) -> AcpNormalizer:
        self.n.finish()
        return self.n


def texts(n: AcpNormalizer, kind: str) -> list[str]:
    return [e.content for e in n.entries if e.type.kind == kind]


def usages(n: AcpNormalizer) -> list[Any]:
    return [e.type.usage for e in n.entries if e.type.kind == "token_usage"]  # type: ignore[union-attr]


# --- messages ------------------------------------------------------------------------------------


def test_deltas_then_the_whole_message_are_shown_once() -> None:
    t = Talk().prompt()
    for piece in ("Hel", "lo"):
        t.chunk(piece, messageId="m1")
    n = t.chunk("Hello", messageId="m1").done().finish()
    assert texts(n, "assistant_message") == ["Hello"]


def test_a_piece_as_long_as_the_text_so_far_is_a_copy_only_when_it_is_the_same_text() -> None:
    # (the normalizer keeps the open message's length: a piece of that length is compared, text
    # and all; a quiet update in between neither splits the message nor counts in its length)
    t = Talk().prompt()
    for piece in ("Hé", "l", "lo"):
        t.chunk(piece, messageId="m1")
    t.update("current_mode_update", currentModeId="plan")
    n = t.chunk("Hellö", messageId="m1").chunk("HélloHellö", messageId="m1").done().finish()
    assert texts(n, "assistant_message") == ["HélloHellö"]
    t = Talk().prompt()
    for piece in ("Hé", "l", "lo"):
        t.chunk(piece, messageId="m1")
    n = t.chunk("Héllo", messageId="m1").done().finish()
    assert texts(n, "assistant_message") == ["Héllo"]


def test_a_single_chunk_repeated_is_text_not_a_copy() -> None:
    # "ha" then "ha" is "haha": only a copy of what two or more deltas built is taken as the whole.
    n = Talk().prompt().chunk("ha").chunk("ha").done().finish()
    assert texts(n, "assistant_message") == ["haha"]


def test_a_new_message_id_starts_a_new_message() -> None:
    n = Talk().prompt().chunk("One.", messageId="a").chunk("Two.", messageId="b").done().finish()
    assert texts(n, "assistant_message") == ["One.", "Two."]


def test_text_of_two_turns_is_never_merged() -> None:
    n = Talk().prompt(3).chunk("first").done(3).prompt(4).chunk("second").done(4).finish()
    assert texts(n, "assistant_message") == ["first", "second"]
    assert n.turn_statuses == ["completed", "completed"]


def test_quiet_state_updates_do_not_split_a_message_and_are_revised_in_place() -> None:
    t = Talk().prompt().chunk("before ")
    t.update("current_mode_update", currentModeId="plan").update("session_info_update", title="T1")
    t.update("config_option_update", configOptions=[{"id": "model", "name": "Model", "currentValue": "a"}])
    t.update("current_mode_update", currentModeId="default").update("session_info_update", title="T2")
    t.update("config_option_update", configOptions=[{"id": "model", "name": "Model", "currentValue": "b"}])
    n = t.chunk("after").done().finish()
    assert texts(n, "assistant_message") == ["before after"]
    assert texts(n, "system_message") == [
        "Mode: default",
        "Session title: T2",
        "Settings: Model: b",
    ]


def test_gemini_mode_marker_is_the_same_quiet_mode_entry() -> None:
    n = Talk().update("current_mode_update", currentModeId="default").chunk("[MODE_UPDATE] yolo").finish()
    assert texts(n, "system_message") == ["Mode: yolo"] and texts(n, "assistant_message") == []


# --- usage ---------------------------------------------------------------------------------------


def test_usage_update_gives_context_window_and_each_turns_part_of_the_cost() -> None:
    t = Talk().prompt(3).update("usage_update", used=10, size=1000, cost={"amount": 0.5, "currency": "USD"})
    t.done(3, usage={"inputTokens": 7, "outputTokens": 3, "totalTokens": 10})
    t.prompt(4).update("usage_update", used=20, size=1000, cost={"amount": 0.75, "currency": "USD"}).done(4)
    n = t.finish()
    first, second = usages(n)
    assert (first.input_tokens, first.output_tokens, first.context_window) == (7, 3, 1000)
    assert first.total_cost_usd == pytest.approx(0.5) and second.total_cost_usd == pytest.approx(0.25)
    assert not [c for c in texts(n, "system_message") if "usage" in c.lower()]


def test_a_cost_in_another_currency_is_not_taken_for_dollars() -> None:
    n = (
        Talk()
        .prompt()
        .update("usage_update", used=1, size=9, cost={"amount": 3, "currency": "EUR"})
        .done()
        .finish()
    )
    [usage] = usages(n)
    assert usage.total_cost_usd is None and usage.context_window == 9


@pytest.mark.parametrize("bad", [{"used": "x", "size": -5}, {"cost": "free"}, {"cost": {"amount": None}}])
def test_usage_updates_of_the_wrong_shape_change_nothing(bad: dict[str, Any]) -> None:
    n = Talk().prompt().update("usage_update", **bad).done().finish()
    [usage] = usages(n)
    assert usage.total_cost_usd is None and usage.context_window is None


# --- a loaded session's history ------------------------------------------------------------------


def test_replayed_history_is_one_history_entry_also_when_it_goes_on_after_the_answer() -> None:
    t = Talk().us(id=2, method="session/load", params={"sessionId": "s", "cwd": "/w", "mcpServers": []})
    t.chunk("earlier question", "user_message_chunk").chunk("earlier answer")
    t.agent({"id": 2, "result": {}})  # Gemini 0.61.0 replays the rest after its answer
    t.update("tool_call", toolCallId="t1", title="Shell", kind="execute", status="completed")
    t.chunk("more of it", _meta={"usage": {"inputTokens": 999}})
    n = t.prompt().chunk("new answer").done().finish()
    history = [e for e in n.entries if (e.metadata.extra or {}).get("history")]
    assert len(history) == 1
    assert history[0].content.count("**User:**") == 1 and "- tool: Shell" in history[0].content
    assert texts(n, "user_message") == ["go"] and texts(n, "assistant_message") == ["new answer"]
    assert not [e for e in n.entries if isinstance(e.type, ToolUse)]
    assert usages(n)[0].input_tokens == 0  # replayed usage is the past's, not this turn's


def test_a_failed_load_ends_the_replay() -> None:
    t = Talk().us(id=2, method="session/load", params={"sessionId": "gone", "cwd": "/w"})
    t.agent({"id": 2, "error": {"code": -32603, "message": "Invalid session identifier"}})
    n = (
        t.us(id=3, method="session/new", params={"cwd": "/w"})
        .agent({"id": 3, "result": {"sessionId": "s"}})
        .chunk("fresh")
        .finish()
    )
    assert texts(n, "assistant_message") == ["fresh"]
    assert [e.type.error.code for e in n.entries if e.type.kind == "error"] == ["resume_failed"]  # type: ignore[union-attr]


def test_a_resumed_session_replays_nothing_and_shows_as_resumed() -> None:
    t = (
        Talk()
        .us(id=2, method="session/resume", params={"sessionId": "s", "cwd": "/w"})
        .agent({"id": 2, "result": {}})
    )
    n = t.prompt().chunk("hi").done().finish()
    assert "Session `s` resumed" in texts(n, "system_message") and texts(n, "assistant_message") == ["hi"]


# --- tools ----------------------------------------------------------------------------------------


def test_a_todo_tool_is_the_plan_not_a_tool() -> None:
    t = (
        Talk()
        .prompt()
        .update("tool_call", toolCallId="c1", title="todowrite", kind="other", status="pending", rawInput={})
    )
    todos = [{"content": "a", "status": "completed"}, {"content": "b", "status": "in_progress"}]
    t.update("tool_call_update", toolCallId="c1", status="in_progress", rawInput={"todos": todos})
    t.update("tool_call_update", toolCallId="c1", status="completed", rawInput={"todos": todos[:1]})
    options = [{"optionId": "y", "name": "y", "kind": "allow_once"}]
    t.agent(
        {
            "id": 0,
            "method": "session/request_permission",
            "params": {
                "sessionId": "s",
                "options": options,
                "toolCall": {"toolCallId": "c1", "title": "todowrite"},
            },
        }
    )
    n = t.us(id=0, result={"outcome": {"outcome": "selected", "optionId": "y"}}).done().finish()
    plans = [e.type for e in n.entries if isinstance(e.type, Plan)]
    assert len(plans) == 1 and [(i.content, i.status) for i in plans[0].items] == [("a", "completed")]
    assert not [e for e in n.entries if isinstance(e.type, ToolUse)]


def test_a_command_given_as_argv_shows_the_command_the_model_asked_for() -> None:
    argv = ["/bin/bash", "-lc", "rm -f keep.txt && echo removed"]
    n = (
        Talk()
        .prompt()
        .update("tool_call", toolCallId="c", kind="execute", title="x", rawInput={"command": argv})
        .finish()
    )
    [entry] = [e.type.tool for e in n.entries if isinstance(e.type, ToolUse)]
    assert isinstance(entry.action, CommandRun) and entry.action.command == "rm -f keep.txt && echo removed"


@pytest.mark.parametrize(
    "update",
    [
        {"sessionUpdate": "tool_call"},
        {"sessionUpdate": "tool_call", "toolCallId": 5, "rawInput": "x", "content": "y", "locations": 3},
        {"sessionUpdate": "agent_message_chunk", "content": "not an object"},
        {"sessionUpdate": "plan", "entries": "nope"},
        {"sessionUpdate": "config_option_update", "configOptions": {"a": 1}},
        {"sessionUpdate": "brand_new_kind", "x": 1},
        "not an object",
    ],
)
def test_updates_of_the_wrong_shape_are_shown_never_raised(update: Any) -> None:
    n = (
        Talk()
        .prompt()
        .agent({"method": "session/update", "params": {"sessionId": "s", "update": update}})
        .chunk("still here")
        .done()
        .finish()
    )
    assert "still here" in texts(n, "assistant_message")
    assert n.turn_statuses == ["completed"]


# --- elicitation and the agent's withdrawn requests ----------------------------------------------


@pytest.mark.parametrize(
    ("action", "shown"),
    [("accept", "answered"), ("decline", "declined"), ("cancel", "cancelled"), ("??", "refused")],
)
def test_an_elicitation_is_shown_with_its_answer(action: str, shown: str) -> None:
    t = (
        Talk()
        .prompt()
        .agent(
            {
                "id": 7,
                "method": "elicitation/create",
                "params": {"sessionId": "s", "mode": "form", "message": "Name?", "requestedSchema": {}},
            }
        )
    )
    n = t.us(id=7, result={"action": action}).done().finish()
    assert f"The agent asks: Name?: {shown}" in texts(n, "system_message")


def test_cancel_request_and_elicitation_complete_add_nothing_themselves() -> None:
    t = (
        Talk()
        .prompt()
        .agent(
            {"method": "$/cancel_request", "params": {"requestId": 1}},
            {"method": "elicitation/complete", "params": {"elicitationId": "e"}},
        )
    )
    n = t.done().finish()
    assert texts(n, "system_message") == []


def test_the_clients_stop_of_a_lingering_agent_is_a_quiet_note() -> None:
    n = Talk().prompt().chunk("done").done().finish()
    patches = n.note(
        {"type": "stopped", "reason": "x stays alive when its input closes; stopped with SIGTERM"}
    )
    assert [p.entry.content for p in patches] == ["x stays alive when its input closes; stopped with SIGTERM"]
    assert n.outcome == "success"


def test_copilots_retry_notice_is_a_retry_not_part_of_the_answer() -> None:
    t = Talk().prompt().chunk("Info: Request failed due to a transient API error. Retrying...")
    n = t.chunk("Recovered.").done().finish()
    assert texts(n, "assistant_message") == ["Recovered."]
    [error] = [e for e in n.entries if e.type.kind == "error"]
    assert error.type.error.code == "api_retry" and n.outcome == "success"  # type: ignore[union-attr]
    # The same words inside an answer are the answer's.
    n = Talk().prompt().chunk("I saw ").chunk("Info: x. Retrying...").done().finish()
    assert texts(n, "assistant_message") == ["I saw Info: x. Retrying..."]


# --- a tool call's status only moves forward; a command's output wherever it comes from --------


class Watched(Talk):
    """A Talk that keeps every status each tool call showed, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: dict[int, list[str]] = {}

    def _seen(self, patches: list[Any]) -> None:
        for p in patches:
            if isinstance(p.entry.type, ToolUse):
                path = self.paths.setdefault(p.index, [])
                if not path or path[-1] != p.entry.type.tool.status:
                    path.append(p.entry.type.tool.status)

    def us(self, **obj: Any) -> Watched:
        self._seen(self.n.feed(line(obj), "stdin"))
        return self

    def agent(self, *objs: Any) -> Watched:
        self._seen(self.n.feed(b"".join(line(o) for o in objs), "stdout"))
        return self

    def call(self, update: str = "tool_call_update", **fields: Any) -> Watched:
        self.update(update, toolCallId="c1", **fields)
        return self

    def ask(self, rid: Any = 0) -> Watched:
        call = {"toolCallId": "c1", "kind": "execute", "rawInput": {"command": "echo hi"}}
        options = [{"optionId": "y", "kind": "allow_once"}, {"optionId": "n", "kind": "reject_once"}]
        params = {"toolCall": call, "options": options}
        self.agent({"id": rid, "method": "session/request_permission", "params": params})
        return self

    def tool(self) -> Any:
        [tool] = [e.type.tool for e in self.n.entries if isinstance(e.type, ToolUse)]
        return tool


_RUN = {"kind": "execute", "rawInput": {"command": "echo hi"}}


@pytest.mark.parametrize(("answer", "path"), [("y", "running"), ("n", "denied")])
def test_in_progress_before_the_question_is_not_yet_running(answer: str, path: str) -> None:
    """(OpenCode 1.18: pending, in_progress, then the question; nothing ran before the answer.)"""
    t = Watched().prompt().call("tool_call", status="pending", **_RUN).call(status="in_progress", **_RUN)
    t.ask().us(id=0, result={"outcome": {"outcome": "selected", "optionId": answer}})
    t.call(status="in_progress", **_RUN)
    if answer == "y":
        t.call(status="completed", rawOutput={"output": "hi\n", "metadata": {"exit": 0}})
    t.done().finish()
    done = "success" if answer == "y" else "denied"
    assert t.paths == {1: ["created", "pending_approval", path] + ([done] if answer == "y" else [])}
    if answer == "y":
        assert t.tool().action.result.exit_code == 0 and t.tool().action.result.stdout == "hi\n"


def test_in_progress_with_output_runs_and_a_later_question_does_not_move_it_back() -> None:
    t = Watched().prompt().call("tool_call", status="in_progress", **_RUN)
    assert t.paths == {1: ["created"]}  # (nothing to show yet: it may still ask)
    t.call(status="in_progress", content=[{"type": "content", "content": {"type": "text", "text": "h"}}])
    t.ask().us(id=0, result={"outcome": {"outcome": "selected", "optionId": "y"}})
    t.call(status="completed").done().finish()
    assert t.paths == {1: ["created", "running", "success"]}
    assert t.tool().approval.decision == "approved"


def test_a_finished_call_announced_again_stays_as_it_ended() -> None:
    """(Droid 0.225, interrupted: failed, then the call again as a bare pending "Tool call".)"""
    t = Watched().prompt().call("tool_call", status="pending", **_RUN).ask()
    t.us(id=0, result={"outcome": {"outcome": "selected", "optionId": "y"}})
    t.call(status="failed")
    t.call("tool_call", status="pending", kind="other", title="Tool call", rawInput={})
    error = [{"type": "content", "content": {"type": "text", "text": "Error: cancelled by user"}}]
    t.call(status="failed", content=error)
    t.us(method="session/cancel", params={}).agent({"id": 3, "result": {"stopReason": "cancelled"}}).finish()
    assert t.paths == {1: ["created", "pending_approval", "running", "failed"]}
    tool = t.tool()
    assert isinstance(tool.action, CommandRun) and tool.action.command == "echo hi"
    assert tool.result.error == "Error: cancelled by user"  # the agent's words, on the call's result


def _terminal(t: Watched, rid: int, method: str, **params: Any) -> Watched:
    return t.agent({"id": rid, "method": method, "params": {"sessionId": "s", **params}})


@pytest.mark.parametrize("link_first", [True, False])
def test_the_output_of_a_command_run_in_our_terminal_lands_on_its_call(link_first: bool) -> None:
    """(Droid 0.225: terminal/create, then content {type: terminal}; the output is our answers.)"""
    t = Watched().prompt().call("tool_call", status="pending", **_RUN).ask()
    t.us(id=0, result={"outcome": {"outcome": "selected", "optionId": "y"}})
    _terminal(t, 1, "terminal/create", command="echo hi").us(id=1, result={"terminalId": "term_1"})
    _terminal(t, 2, "terminal/wait_for_exit", terminalId="term_1")
    _terminal(t, 3, "terminal/output", terminalId="term_1")
    link = {"status": "in_progress", "content": [{"type": "terminal", "terminalId": "term_1"}]}
    if link_first:
        t.call(**link)
    t.us(id=3, result={"output": "hi\n", "truncated": False})
    if not link_first:
        t.call(**link)
    t.us(id=2, result={"exitCode": 3, "signal": None})
    _terminal(t, 4, "terminal/output", terminalId="term_1")
    t.us(id=4, error={"code": -32602, "message": "no terminal 'term_1'"})  # (released)
    t.call(status="completed").done().finish()
    result = t.tool().action.result
    assert (result.stdout, result.exit_code) == ("hi\n", 3)
    assert t.paths == {1: ["created", "pending_approval", "running", "success"]}


def test_a_killed_terminal_command_has_no_output_and_the_agents_words_are_not_its_stdout() -> None:
    t = Watched().prompt().call("tool_call", status="pending", **_RUN)
    _terminal(t, 1, "terminal/create", command="echo hi").us(id=1, result={"terminalId": "term_1"})
    t.call(status="in_progress", content=[{"type": "terminal", "terminalId": "term_1"}])
    _terminal(t, 2, "terminal/wait_for_exit", terminalId="term_1")
    t.us(id=2, result={"exitCode": None, "signal": "SIGTERM"})
    error = [{"type": "content", "content": {"type": "text", "text": "Error: cancelled by user"}}]
    t.call(status="failed", content=error).done().finish()
    assert t.tool().action.result is None and t.tool().status == "failed"


@pytest.mark.parametrize(
    ("raw", "content", "expected"),
    [
        # codex-acp 0.16: stdout, stderr and exit_code in rawOutput, no content
        ({"stdout": "hi\n", "stderr": "warn\n", "exit_code": 2}, None, ("hi\n", "warn\n", 2)),
        # Qwen: rawOutput output and exitCode
        ({"type": "shell_result", "output": "hi", "exitCode": 0}, None, ("hi", None, 0)),
        # OpenCode 1.18: output, the exit code in metadata
        ({"output": "hi\n", "metadata": {"exit": 1}}, "hi\n", ("hi\n", None, 1)),
        # claude-code-acp: rawOutput the plain output, content the same dressed as markdown
        ("hi", "```console\nhi\n```", ("hi", None, -1)),
        # only text content
        (None, "hi", ("hi", None, -1)),
    ],
)
def test_a_commands_output_is_read_from_each_agents_shape(raw: Any, content: Any, expected: Any) -> None:
    fields: dict[str, Any] = {"status": "completed"}
    if raw is not None:
        fields["rawOutput"] = raw
    if content is not None:
        fields["content"] = [{"type": "content", "content": {"type": "text", "text": content}}]
    t = Watched().prompt().call("tool_call", status="in_progress", **_RUN).call(**fields)
    result = t.done().finish() and t.tool().action.result
    assert (result.stdout, result.stderr, result.exit_code) == expected


def test_terminals_an_agent_never_releases_are_not_kept_without_end() -> None:
    from orchestrate.normalizers.acp_output import _MAX_TRACKED, Terminals

    terminals = Terminals()
    for i in range(_MAX_TRACKED + 50):
        terminals.asked(i, "terminal/create", {})
        terminals.answered(i, {"terminalId": f"t{i}"})
        terminals.asked(-i - 1, "terminal/output", {"terminalId": f"t{i}"})  # never answered
    assert len(terminals._terminals) <= _MAX_TRACKED and len(terminals._asks) <= _MAX_TRACKED
    assert terminals.answered("unknown", {"output": "x"}) == ""


_STATUSES = ["created", "pending_approval", "running", "success", "failed", "denied", "cancelled", None]


@given(st.lists(st.tuples(st.sampled_from(_STATUSES), st.booleans()), max_size=12))
def test_advance_never_moves_a_status_back(reports: list[tuple[Any, bool]]) -> None:
    from orchestrate.normalizers.acp_output import advance

    rank = {"created": 0, "pending_approval": 1, "running": 2}
    status: Any = None
    for reported, progress in reports:
        after = advance(status, reported, progress=progress)
        if status is not None:
            assert rank.get(after, 3) >= rank.get(status, 3)
            if status not in rank:
                assert after == status
        status = after


def test_output_in_our_terminal_shows_its_call_running_before_any_update_says_so() -> None:
    t = Watched().prompt().call("tool_call", status="pending", **_RUN)
    _terminal(t, 1, "terminal/create", command="echo hi").us(id=1, result={"terminalId": "term_1"})
    t.call(content=[{"type": "terminal", "terminalId": "term_1"}])  # (no status: still created)
    assert t.paths == {1: ["created"]}
    _terminal(t, 2, "terminal/output", terminalId="term_1").us(id=2, result={"output": "h"})
    assert t.paths == {1: ["created", "running"]} and t.tool().action.result.stdout == "h"


def test_a_normalizer_has_fewer_than_thirty_attributes() -> None:
    # CPython (3.11) shares an instance's __dict__ keys with its class for at most 29 of them: at
    # 30 every normalizer gets a dict of its own, dearer to make, and every attribute read in the
    # base class and here slows down (measured on Gemini's captures: about 2 % more instructions
    # per run).  Keep new state in one of the existing attributes, or take one away.
    assert len(vars(AcpNormalizer())) < 30


@pytest.mark.parametrize("folder", ["acp-gemini", "acp-qwen"])
def test_a_finished_normalizer_is_freed_without_the_garbage_collector(folder: str) -> None:
    """As Claude's (test_claude_normalizer.py): no reference cycle unless bound (the sweep hook
    that trims the tool tables is tied in by ``bound``).  Gemini's captures are a dozen lines a
    run: a normalizer left to the collector cost about 4 % more instructions over them."""
    assert_freed_without_the_collector(folder, AcpNormalizer, 1)
