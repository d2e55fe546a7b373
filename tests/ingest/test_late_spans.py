"""A span that arrives after its turn was closed (its parent invoke_agent came, and ended
the turn, in an earlier body) is recorded as a late fact of that turn, at its own times,
through `POST /v1/traces`: no turn of its own, and a turn open meanwhile stays open."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from projections.chat import NoteItem
from sessions_app.models import Event, ObservedConversation
from sessions_app.selectors import pages, session_turn_state
from sessions_app.selectors.sessions import session_rows
from sessions_app.services import tokens
from tests.api.conftest import content_of
from tests.ingest.spans import MS, T0, agent_run, body

pytestmark = pytest.mark.django_db


@pytest.fixture
def client() -> Client:
    carol = User.objects.create_user(username="carol", password="carol-pass-1234")
    return Client(HTTP_AUTHORIZATION=f"Bearer {tokens.token_create(carol, 't')[1]}")


def send(client: Client, *spans: dict[str, Any]) -> None:
    answer = client.post("/v1/traces", json.dumps(body(*spans)), content_type="application/json")
    assert answer.status_code == 200, answer.content
    assert answer.json() == {}  # no span refused


def log_of(conversation: str) -> list[Event]:
    row = ObservedConversation.objects.get(key=f"conversation:{conversation}")
    return list(Event.objects.filter(session_id=row.session_id).order_by("seq"))


def test_a_span_after_its_closed_turn_is_placed_in_that_turn(client: Client) -> None:
    root, chat, tool, answer = agent_run("conv-late")
    send(client, root, chat)  # the run's invoke_agent ends turn 0 here
    send(client, tool, answer)  # its execute_tool and last chat come later
    events = log_of("conv-late")
    kinds = [e.type for e in events]
    assert kinds.count("turn/start") == 1 and kinds.count("turn/end") == 1
    late = events[kinds.index("turn/end") + 1 :]
    assert [e.type for e in late] == [
        "tool/call",
        "tool/result",
        "step/start",
        "request/sent",
        "assistant/message",
        "step/end",
    ]
    assert {e.turn for e in late} == {0}
    # The tool joins the step whose reply asked for it; the chat is the turn's next step.
    assert [e.step for e in late] == [0, 0, 1, 1, 1, 1]
    # Each at its own span's time: the execute_tool span started 31 ms into the run.
    started = datetime.fromtimestamp((T0 + 31 * MS) / 1e9, UTC)
    assert late[0].data["observed"]["time"] == started.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    session = ObservedConversation.objects.get(key="conversation:conv-late").session
    trace = pages.trace_window(session, session.leaf_entry_id, everywhere=True).trace
    assert trace is not None and not trace.running
    (turn,) = trace.spans
    assert turn.kind == "turn" and turn.turn == 0 and turn.status == "ok"
    steps = [s for s in turn.children if s.kind == "step"]
    assert [s.step for s in steps] == [0, 1]
    assert [c.kind for c in steps[0].children].count("tool") == 1

    send(client, tool, answer)  # the late body again: recorded once
    assert len(log_of("conv-late")) == len(events)


def test_a_late_span_leaves_the_turn_open_meanwhile_open(client: Client) -> None:
    a_root, a_chat, a_tool, _ = agent_run("conv-two", trace="a" * 32)
    b_run = agent_run("conv-two", trace="b" * 32, question="More?", answer="Yes.")
    for one in b_run:  # the second run's spans start later, with ids of their own
        one["spanId"] = one["spanId"].replace("1", "5").replace("2", "6").replace("3", "7")
        one["startTimeUnixNano"] = str(int(one["startTimeUnixNano"]) + 1000 * MS)
        one["endTimeUnixNano"] = str(int(one["endTimeUnixNano"]) + 1000 * MS)
        if "parentSpanId" in one:
            one["parentSpanId"] = "5" * 16
    send(client, a_root, a_chat)  # turn 0, closed
    send(client, b_run[1])  # turn 1 opens (its invoke_agent is still running)
    send(client, a_tool)  # late: turn 0's
    send(client, b_run[0])  # turn 1's invoke_agent ends it
    events = log_of("conv-two")
    assert [(e.type, e.turn) for e in events if e.type in ("turn/start", "turn/end")] == [
        ("turn/start", 0),
        ("turn/end", 0),
        ("turn/start", 1),
        ("turn/end", 1),
    ]
    tool_facts = [(e.type, e.turn, e.step) for e in events if e.type.startswith("tool/")]
    assert tool_facts == [("tool/call", 0, 0), ("tool/result", 0, 0)]
    session = ObservedConversation.objects.get(key="conversation:conv-two").session
    trace = pages.trace_window(session, session.leaf_entry_id, everywhere=True).trace
    assert trace is not None and [s.turn for s in trace.spans] == [0, 1]
    assert not trace.running


def test_a_late_invoke_agent_is_its_closed_turns_status_end_and_attributes(
    client: Client,
) -> None:
    """Run a's spans come before its invoke_agent, and run b's first span closes a's turn
    (rootless): a's invoke_agent, failed, comes last. It opens no turn: it is turn 0's."""
    a_root, a_chat, a_tool, a_answer = agent_run("conv-root", trace="a" * 32)
    a_root["status"] = {"code": 2, "message": "the agent gave up"}
    a_root["endTimeUnixNano"] = str(int(a_root["endTimeUnixNano"]) + 400 * MS)
    a_root["attributes"].append({"key": "custom.late", "value": {"stringValue": "kept"}})
    b_run = agent_run("conv-root", trace="b" * 32, question="More?", answer="Yes.")
    for one in b_run:
        one["spanId"] = one["spanId"].replace("1", "5").replace("2", "6").replace("3", "7")
        one["startTimeUnixNano"] = str(int(one["startTimeUnixNano"]) + 200 * MS)
        one["endTimeUnixNano"] = str(int(one["endTimeUnixNano"]) + 200 * MS)
        if "parentSpanId" in one:
            one["parentSpanId"] = "5" * 16
    send(client, a_chat, a_tool, a_answer)  # turn 0 opens; its root is still running
    send(client, *b_run)  # turn 1: its first span closes turn 0 without a root
    send(client, a_root)  # a's root, late
    events = log_of("conv-root")
    marks = [(e.type, e.turn) for e in events if e.type.startswith("turn/")]
    assert marks == [
        ("turn/start", 0),
        ("turn/end", 0),
        ("turn/start", 1),
        ("turn/end", 1),
        ("turn/observed", 0),
    ]
    observed = events[-1]
    assert observed.data["reason"] == "error" and observed.data["error"] == "the agent gave up"
    assert observed.data["observed"]["span_id"] == "1" * 16
    assert observed.data["observed"]["attributes"]["custom.late"] == "kept"

    session = ObservedConversation.objects.get(key="conversation:conv-root").session
    trace = pages.trace_window(session, session.leaf_entry_id, everywhere=True).trace
    assert trace is not None and [s.turn for s in trace.spans] == [0, 1]
    first, second = trace.spans
    assert (first.status, first.error) == ("error", "the agent gave up")
    assert second.status == "ok"
    # Turn 0 ends when its agent span ended (500 ms in), after the spans it holds.
    ended = datetime.fromtimestamp((T0 + 500 * MS) / 1e9, UTC)
    assert first.end == ended
    outputs = dict(first.outputs)
    assert outputs["otel_span"] == f"{'a' * 32}/{'1' * 16}"
    assert '"custom.late": "kept"' in outputs["attributes"]
    # The chat says how turn 0 ended, as it would had the span come in time.
    chat = pages.chat_window(session, session.leaf_entry_id).chat
    notes = [item for item in chat.items if isinstance(item, NoteItem)]
    assert [(n.turn, n.notice.text) for n in notes] == [(0, "Error: the agent gave up")]

    # Exported again, turn 0's invoke_agent is the failed span, ending when a's did.
    answer = client.get(f"/api/sessions/{session.id}/export.otlp.json")
    assert answer.status_code == 200
    document = json.loads(content_of(answer))
    spans = [s for r in document["resourceSpans"] for c in r["scopeSpans"] for s in c["spans"]]
    agents = sorted(
        (s for s in spans if s["name"].startswith("invoke_agent")),
        key=lambda s: int(s["startTimeUnixNano"]),
    )
    assert [s["status"].get("code") for s in agents] == [2, 1]
    assert agents[0]["endTimeUnixNano"] == str(T0 + 500 * MS)

    send(client, a_root)  # the same span again: recorded once
    assert len(log_of("conv-root")) == len(events)


def test_a_late_outer_agent_span_fails_the_latest_turn_in_the_session_list(
    client: Client,
) -> None:
    """An agent that delegates in its own trace: the inner invoke_agent ends first and
    closes the turn; the outer one, failed, comes in the next body. The sessions list says
    the turn ended in error, as the chat and the trace do."""
    root, chat, tool, answer = agent_run("conv-nested")
    inner = json.loads(json.dumps(root))
    inner["spanId"], inner["parentSpanId"] = "9" * 16, root["spanId"]
    for one in (chat, tool, answer):
        one["parentSpanId"] = inner["spanId"]
    root["status"] = {"code": 2, "message": "the outer agent gave up"}
    send(client, inner, chat, tool, answer)  # turn 0 ends with its inner agent
    send(client, root)
    events = log_of("conv-nested")
    assert [e.type for e in events if e.type.startswith("turn/")] == [
        "turn/start",
        "turn/end",
        "turn/observed",
    ]
    session = ObservedConversation.objects.get(key="conversation:conv-nested").session
    carol = User.objects.get(username="carol")
    (row,) = session_rows(carol)
    assert row.state == "error"
    state = session_turn_state(session)
    assert (state.turn, state.last_reason, state.label) == (0, "error", "error")
