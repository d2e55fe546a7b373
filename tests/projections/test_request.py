from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from projections.context import COMPACTION_PREAMBLE
from projections.request import (
    FieldChange,
    RequestNotFound,
    RequestView,
    diff_requests,
    project_request,
)
from tests.projections.fixtures import READ_TOOL, SYSTEM_PROMPT, SessionLog, text, tool_call

# The neutral messages each request is expected to carry, written out by hand: the
# fixture hashes these, so a context built wrongly no longer matches.
USER_1: dict[str, Any] = {"role": "user", "content": "Read a.txt"}
ASSISTANT_1: dict[str, Any] = {
    "role": "assistant",
    "content": [text("Reading."), tool_call("c1", "read", {"path": "a.txt"})],
}
RESULT_1: dict[str, Any] = {
    "role": "toolResult",
    "toolCallId": "c1",
    "toolName": "read",
    "content": [text("hello")],
    "isError": False,
}
ANSWER_1: dict[str, Any] = {"role": "assistant", "content": [text("It says hello.")]}


def first_turn(log: SessionLog) -> dict[str, int | str]:
    marks: dict[str, int | str] = {}
    log.turn_start()
    log.step_start()
    marks["u1"] = log.user("Read a.txt")
    marks["req1"] = log.request([USER_1], token_estimate=3)
    marks["a1"] = log.assistant(ASSISTANT_1["content"], stop_reason="toolUse")
    log.tool_call("c1", "read", '{"path":"a.txt"}')
    marks["r1"] = log.tool_result("c1", "read", "hello")
    log.step_end()
    log.step_start()
    marks["req2"] = log.request([USER_1, ASSISTANT_1, RESULT_1])
    marks["a2"] = log.assistant(ANSWER_1["content"])
    log.step_end()
    log.turn_end()
    return marks


def session() -> tuple[SessionLog, dict[str, int | str]]:
    log = SessionLog()
    log.created()
    log.header()
    return log, first_turn(log)


def view(log: SessionLog, seq: int | str) -> RequestView:
    assert isinstance(seq, int)
    return project_request(log.events, log.entries, seq)


def test_first_request_is_rebuilt_and_matches_its_manifest() -> None:
    log, marks = session()

    request = view(log, marks["req1"])

    assert request.matches
    assert request.payload_sha256 == request.recorded_sha256
    assert request.error is None
    assert (request.provider, request.model) == ("openai", "gpt-test")
    assert request.params == {"temperature": 0.2}
    assert request.system_prompt == SYSTEM_PROMPT
    assert [tool.name for tool in request.tools] == ["read"]
    assert request.tools[0].parameters == READ_TOOL["parameters"]
    assert request.leaf_entry_id == marks["u1"]
    assert [(m.role, m.text, m.tokens) for m in request.messages] == [("user", "Read a.txt", 3)]
    assert request.token_total == 3
    assert request.recorded_token_estimate == 3
    assert request.response_entry_id == marks["a1"]
    assert (request.turn, request.step) == (1, 1)
    assert request.payload is not None
    assert request.payload["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}


def test_second_request_carries_the_tool_round_trip_but_not_later_entries() -> None:
    log, marks = session()

    request = view(log, marks["req2"])

    assert request.matches
    assert [m.role for m in request.messages] == ["user", "assistant", "toolResult"]
    assert request.token_total == sum(m.tokens for m in request.messages)
    assert request.response_entry_id == marks["a2"]


def test_request_after_a_compaction_starts_with_the_summary() -> None:
    log, marks = session()
    log.compaction("User read a.txt; it says hello.", str(marks["a2"]), 2000)
    log.turn_start()
    log.step_start()
    log.user("Now b.txt")
    summary = {
        "role": "user",
        "content": [
            text(f"{COMPACTION_PREAMBLE}<summary>\nUser read a.txt; it says hello.\n</summary>")
        ],
    }
    seq = log.request([summary, ANSWER_1, {"role": "user", "content": "Now b.txt"}])

    request = view(log, seq)

    assert request.matches
    assert [m.role for m in request.messages] == ["compactionSummary", "assistant", "user"]
    assert request.messages[0].text == "User read a.txt; it says hello."


def test_request_on_another_branch_sees_only_its_path() -> None:
    log, marks = session()
    log.turn_start()
    log.step_start()
    log.user("Now b.txt")
    log.assistant([text("b says bye.")])
    log.step_end()
    log.turn_end()
    log.navigate(str(marks["a2"]))
    log.turn_start()
    log.step_start()
    log.user("Instead, c.txt")
    seq = log.request(
        [USER_1, ASSISTANT_1, RESULT_1, ANSWER_1, {"role": "user", "content": "Instead, c.txt"}]
    )

    assert view(log, seq).matches


def test_aborted_replies_are_left_out_of_the_next_request() -> None:
    log = SessionLog()
    log.header()
    log.turn_start()
    log.step_start()
    log.user("Read a.txt")
    log.assistant([text("Read")], stop_reason="aborted")
    log.step_end()
    log.turn_end("aborted")
    log.turn_start()
    log.step_start()
    log.user("again")
    seq = log.request([USER_1, {"role": "user", "content": "again"}])

    request = view(log, seq)

    assert request.matches
    # The context still holds the aborted reply; only the provider boundary drops it.
    assert [m.role for m in request.messages] == ["user", "assistant", "user"]


def test_anthropic_request_matches() -> None:
    log = SessionLog()
    log.header(provider="anthropic", model="claude-test", params={"max_tokens": 2048})
    log.turn_start()
    log.step_start()
    log.user("Read a.txt")
    seq = log.request([USER_1])

    request = view(log, seq)

    assert request.matches
    assert request.payload is not None
    assert request.payload["system"] == SYSTEM_PROMPT
    assert request.payload["max_tokens"] == 2048


def test_a_different_recorded_hash_does_not_match() -> None:
    log = SessionLog()
    log.header()
    log.turn_start()
    log.step_start()
    log.user("Read a.txt")
    # What the runtime claims it sent differs from what the stored facts give.
    seq = log.request([{"role": "user", "content": "Read b.txt"}])

    request = view(log, seq)

    assert not request.matches
    assert request.payload_sha256 != request.recorded_sha256


def test_payload_that_cannot_be_rebuilt_reports_why() -> None:
    log = SessionLog()
    log.header(params={"temperature": 0})
    log.turn_start()
    log.step_start()
    log.user("hi")
    seq = log.request([{"role": "user", "content": "hi"}])
    header = log.events[log.header_seq or 0]
    broken = replace(header, data={**header.data, "params": {"messages": []}})
    events = [broken if e is header else e for e in log.events]

    request = project_request(events, log.entries, seq)

    assert not request.matches
    assert request.payload is None
    assert request.error is not None and "messages" in request.error


def test_unknown_request_or_missing_header_raises() -> None:
    log, marks = session()

    with pytest.raises(RequestNotFound):
        project_request(log.events, log.entries, 0)
    assert isinstance(marks["req1"], int)
    without_header = [e for e in log.events if e.type != "request/header"]
    with pytest.raises(RequestNotFound, match="request/header"):
        project_request(without_header, log.entries, marks["req1"])


def test_diff_between_consecutive_requests_lists_added_messages() -> None:
    log, marks = session()

    diff = diff_requests(view(log, marks["req1"]), view(log, marks["req2"]))

    assert diff.unchanged == 1
    assert [(c.kind, c.after.role if c.after else None) for c in diff.changes] == [
        ("added", "assistant"),
        ("added", "toolResult"),
    ]
    assert diff.removed == () and diff.changed == ()
    assert diff.header_changes == ()
    assert diff.token_delta == diff.tokens_after - diff.tokens_before > 0


def test_diff_shows_header_changes_and_compaction_rewrites() -> None:
    log, marks = session()
    log.compaction("summary", str(marks["a2"]), 2000)
    log.header(params={"temperature": 0.7}, reason="change", tools=())
    log.turn_start()
    log.step_start()
    log.user("next")
    seq = log.request([])  # the hash does not matter here

    diff = diff_requests(view(log, marks["req2"]), view(log, seq))

    assert diff.header_changes == (
        FieldChange("params.temperature", 0.2, 0.7),
        FieldChange("tools.read", view(log, marks["req2"]).tools[0], None),
    )
    shown = [(c.kind, (c.before or c.after).role) for c in diff.changes]  # type: ignore[union-attr]
    assert shown == [
        ("removed", "user"),
        ("removed", "assistant"),
        ("removed", "toolResult"),
        ("added", "compactionSummary"),
        ("added", "assistant"),
        ("added", "user"),
    ]
    assert diff.unchanged == 0


def test_diff_pairs_an_edited_message_as_changed() -> None:
    log = SessionLog()
    log.header()
    log.turn_start()
    log.step_start()
    log.user("Read a.txt")
    before = log.request([USER_1])
    log.step_end()
    log.turn_end()
    log.navigate(None)
    log.turn_start()
    log.step_start()
    log.user("Read b.txt")
    after = log.request([{"role": "user", "content": "Read b.txt"}])

    diff = diff_requests(view(log, before), view(log, after))

    [change] = diff.changes
    assert change.kind == "changed"
    assert change.before is not None and change.before.text == "Read a.txt"
    assert change.after is not None and change.after.text == "Read b.txt"
