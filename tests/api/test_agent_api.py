"""Running the agent through the API: messages, steer, follow-up, cancel, approvals,
compaction, navigation, rate limits, and the trace and request views of real turns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessions_app import agent, services, store
from sessions_app.models import Session
from tests.api.conftest import OFFLINE_PRESET, Api, body_of, wait_for, wait_idle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def session(alice: Any, workspace: Path) -> Session:
    return services.session_create(
        owner=alice, title="work", cwd=str(workspace), preset=OFFLINE_PRESET
    )


def types(session: Session) -> list[str]:
    return [e.type for e in store.events_after(session.id, -1, 10_000)]


def waiting_for_approval(api: Api, session: Session) -> str:
    sent = api.post(f"/sessions/{session.id}/messages", {"text": "write notes.txt: changed"})
    assert sent.status_code == 202
    pending = wait_for(lambda: body_of(api.get(f"/sessions/{session.id}/approvals")))
    assert [p["tool"] for p in pending] == ["write"]
    return str(pending[0]["approval_id"])


def test_a_message_starts_a_turn_and_every_view_shows_it(as_alice: Api, session: Session) -> None:
    response = as_alice.post(f"/sessions/{session.id}/messages", {"text": "list files"})
    assert response.status_code == 202
    sent = body_of(response)
    assert sent["inbox_id"] is None and sent["target"] is None
    turn = sent["turn"]
    wait_idle(session)

    events = body_of(as_alice.get(f"/sessions/{session.id}/events?limit=1000"))["events"]
    starts = [e for e in events if e["type"] == "turn/start"]
    assert [e["data"]["turn"] for e in starts] == [turn]
    chat = body_of(as_alice.get(f"/sessions/{session.id}/views/chat"))
    assert [i["kind"] for i in chat["items"]][:2] == ["user", "assistant"]
    assert chat["items"][1]["tool_calls"][0]["name"] == "ls"

    trace = body_of(as_alice.get(f"/sessions/{session.id}/views/trace"))
    assert trace["turns"] == [turn] and trace["running"] is False
    assert trace["spans"][0]["kind"] == "turn" and trace["spans"][0]["status"] == "ok"
    assert trace["spans"][0]["duration_ms"] >= 0

    requests = [e["seq"] for e in events if e["type"] == "request/sent"]
    assert len(requests) == 2  # the tool call, then the answer to its result
    for seq in requests:
        view = body_of(as_alice.get(f"/sessions/{session.id}/views/requests/{seq}"))
        assert view["matches"] is True and view["seq"] == seq
        assert view["provider"] == "offline" and view["messages"]
    not_a_request = [e["seq"] for e in events if e["type"] == "turn/start"][0]
    response = as_alice.get(f"/sessions/{session.id}/views/requests/{not_a_request}")
    assert response.status_code == 404
    assert body_of(as_alice.get(f"/sessions/{session.id}"))["turn_status"] == "idle"


def test_input_while_a_turn_runs(as_alice: Api, session: Session) -> None:
    approval = waiting_for_approval(as_alice, session)
    base = f"/sessions/{session.id}"
    busy = as_alice.post(f"{base}/messages", {"text": "another"})
    assert busy.status_code == 409 and body_of(busy)["error"] == "conflict"
    steer = body_of(as_alice.post(f"{base}/steer", {"text": "mind the tests"}))
    assert steer["turn"] is None and steer["target"] == "next_step" and steer["inbox_id"]
    follow = body_of(as_alice.post(f"{base}/follow-up", {"text": "then summarize"}))
    assert follow["target"] == "next_turn" and follow["inbox_id"]
    assert body_of(as_alice.get(base))["turn_status"] == "running"

    decided = as_alice.post(f"{base}/approvals/{approval}", {"outcome": "rejected"})
    assert decided.status_code == 204
    again = as_alice.post(f"{base}/approvals/{approval}", {"outcome": "allowed"})
    assert again.status_code == 409
    assert as_alice.post(f"{base}/approvals/{approval}", {"outcome": "maybe"}).status_code == 422
    wait_idle(session)
    assert types(session).count("turn/start") == 2  # the follow-up started the next turn
    assert "inbox/claimed" in types(session)
    assert as_alice.post(f"{base}/approvals/unknown", {"outcome": "allowed"}).status_code == 409


def test_cancel_ends_the_turn(as_alice: Api, session: Session) -> None:
    waiting_for_approval(as_alice, session)
    response = as_alice.post(f"/sessions/{session.id}/cancel")
    assert response.status_code == 202 and body_of(response) == {"running": True}
    wait_idle(session)
    ends = [e for e in store.events_after(session.id, -1, 1000) if e.type == "turn/end"]
    assert ends[-1].data["reason"] == "aborted"
    idle = as_alice.post(f"/sessions/{session.id}/cancel")
    assert body_of(idle) == {"running": False}


def test_compact_then_nothing_left_to_compact(as_alice: Api, session: Session) -> None:
    for text in ("first question", "second question", "third question"):
        assert as_alice.post(f"/sessions/{session.id}/messages", {"text": text}).status_code == 202
        wait_idle(session)
    response = as_alice.post(f"/sessions/{session.id}/compact", {"instructions": "be brief"})
    assert response.status_code == 200, response.content
    compacted = body_of(response)
    assert compacted["summary"] and compacted["tokens_before"] > 0
    assert store.entries_by_id(session.id, [compacted["entry_id"]])[0].type == "compaction"
    again = as_alice.post(f"/sessions/{session.id}/compact", {})
    assert again.status_code == 422 and body_of(again)["error"] == "invalid"


def test_navigate_back_with_a_branch_summary(as_alice: Api, session: Session) -> None:
    assert (
        as_alice.post(f"/sessions/{session.id}/messages", {"text": "read notes.txt"}).status_code
        == 202
    )
    wait_idle(session)
    first_user = store.entries_of(session.id)[0]
    response = as_alice.post(
        f"/sessions/{session.id}/navigate", {"entry_id": first_user.id, "summarize": True}
    )
    assert response.status_code == 200
    navigated = body_of(response)
    assert navigated["editor_text"] == "read notes.txt"
    assert navigated["summary_entry_id"] == navigated["leaf_id"]
    missing = as_alice.post(f"/sessions/{session.id}/navigate", {"entry_id": "nope"})
    assert missing.status_code == 404


def test_sending_is_rate_limited_per_user(
    as_alice: Api, as_bob: Api, session: Session, bob: Any, settings: Any
) -> None:
    settings.STRAND_RATE_LIMITS = {"message": (2, 60)}
    for text in ("one", "two"):
        assert as_alice.post(f"/sessions/{session.id}/messages", {"text": text}).status_code == 202
        wait_idle(session)
    limited = as_alice.post(f"/sessions/{session.id}/steer", {"text": "three"})
    assert limited.status_code == 429
    assert 0 < body_of(limited)["retry_after"] <= 60
    assert limited["Retry-After"] == str(body_of(limited)["retry_after"])
    bobs = services.session_create(owner=bob, preset=OFFLINE_PRESET)
    assert as_bob.post(f"/sessions/{bobs.id}/messages", {"text": "mine"}).status_code == 202
    wait_idle(bobs)


def test_a_hostile_message_is_answered_and_returned_as_data(
    as_alice: Api, session: Session
) -> None:
    text = "<script>alert(1)</script><img src=x onerror=alert(1)> [x](javascript:alert(1))"
    assert as_alice.post(f"/sessions/{session.id}/messages", {"text": text}).status_code == 202
    wait_idle(session)
    response = as_alice.get(f"/sessions/{session.id}/views/chat")
    assert b"<" not in response.content
    items = body_of(response)["items"]
    assert items[0]["text"] == text and items[1]["kind"] == "assistant"


def test_agent_errors_for_a_session_without_a_working_directory(as_alice: Api, alice: Any) -> None:
    bare = services.session_create(owner=alice, preset=OFFLINE_PRESET)
    response = as_alice.post(f"/sessions/{bare.id}/messages", {"text": "read notes.txt"})
    assert response.status_code == 202
    wait_idle(bare)
    assert agent.agent_turn_status(bare) == "idle"
