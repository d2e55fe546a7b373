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

from sessions_app.models import Event, ObservedConversation
from sessions_app.selectors import pages
from sessions_app.services import tokens
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
