"""The offline model produces every provider fault on request (`fault KIND [once]`), and
each is recorded as the same facts a real provider's would be."""

from __future__ import annotations

import pytest

from runtime.offline_faults import FAULTS
from sessions_app import agent, store

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED_KIND = {"bad-args": "invalid_tool_arguments"}


def replies(session):
    return [e for e in store.events_after(session.id, -1, 10_000) if e.type == "assistant/message"]


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_each_fault_word_fails_the_reply_the_way_a_provider_would(make_session, name):
    session = make_session(max_retries=0, request_timeout_s=0.2)
    ended = agent.agent_run_foreground(session.id, f"please fault {name}")
    assert [e.reason for e in ended] == ["error"]
    [reply] = replies(session)
    message = reply.data["entry"]["message"]
    assert message["stopReason"] == "error" and message["errorMessage"] == ended[0].error
    assert reply.data["fault"]["kind"] == EXPECTED_KIND.get(name, FAULTS[name].kind)
    assert reply.data["fault"].get("status") == FAULTS[name].status
    kept = "".join(b.get("text", "") for b in message["content"])
    said = "Reading it now." if name in ("cut-tool", "bad-args") else ""
    assert kept.strip() == (FAULTS[name].partial.strip() or said)
    types = [e.type for e in store.events_after(session.id, -1, 10_000)]
    assert "tool/call" not in types and types[-2:] == ["step/end", "turn/end"]


def test_a_fault_once_is_retried_and_the_retry_succeeds(make_session):
    session = make_session(max_retries=1, retry_backoff_s=0.01)
    ended = agent.agent_run_foreground(session.id, "fault 503 once")
    assert [e.reason for e in ended] == ["completed"]
    sent = [e.data for e in store.events_after(session.id) if e.type == "request/sent"]
    assert [s["attempt"] for s in sent] == [1, 2]
    assert sent[1]["previous_fault"]["status"] == 503
    [reply] = replies(session)
    assert reply.data["entry"]["message"]["stopReason"] == "stop"


def test_without_once_every_attempt_fails_until_max_retries(make_session):
    session = make_session(max_retries=2, retry_backoff_s=0.01)
    ended = agent.agent_run_foreground(session.id, "fault 529")
    assert [e.reason for e in ended] == ["error"]
    [reply] = replies(session)
    assert reply.data["fault"]["attempts"] == 3
    assert "All 3 attempts failed" in reply.data["entry"]["message"]["errorMessage"]
