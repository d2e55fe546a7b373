"""Retry through the API: a new turn from where a failed reply was asked; refusals are
4xx with an error code and write nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessions_app import services, store
from sessions_app.models import Session
from tests.api.conftest import Api, body_of, wait_idle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def session(alice: Any, workspace: Path, serve_preset: Any) -> Session:
    name = serve_preset("flaky", **{**services.DEFAULT_PRESET, "max_retries": 0})
    return services.session_create(owner=alice, title="flaky", cwd=str(workspace), preset=name)


def failed(api: Api, session: Session, text: str) -> str:
    assert api.post(f"/sessions/{session.id}/messages", {"text": text}).status_code == 202
    wait_idle(session)
    [reply] = [e for e in store.events_after(session.id) if e.type == "assistant/message"]
    assert reply.data["entry"]["message"]["stopReason"] == "error"
    assert reply.entry_id is not None
    return reply.entry_id


def test_retry_starts_a_turn_that_answers_from_the_same_point(as_alice: Api, session: Session):
    entry_id = failed(as_alice, session, "fault 529 once through the api")
    chat = body_of(as_alice.get(f"/sessions/{session.id}/views/chat"))
    fault = chat["items"][1]["fault"]
    assert (fault["kind"], fault["status"], fault["attempts"]) == ("overloaded", 529, 1)
    response = as_alice.post(f"/sessions/{session.id}/retry", {"entry_id": entry_id})
    assert response.status_code == 202 and body_of(response)["turn"] == 2
    wait_idle(session)
    turn2 = [e for e in store.events_after(session.id) if e.turn == 2]
    assert turn2[0].data == {"turn": 2, "trigger": "retry", "retry_of": entry_id}
    assert turn2[-1].type == "turn/end" and turn2[-1].data["reason"] == "completed"
    # Without an entry id, the current leaf is retried: it did not fail.
    again = as_alice.post(f"/sessions/{session.id}/retry", {})
    assert again.status_code == 422 and body_of(again)["error"] == "invalid"


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({"entry_id": "x" * 65}, 422, None),
        ({"entry_id": ""}, 422, None),
        ({"entry_id": "nope1234"}, 404, "not_found"),
        ({"entry_id": 7}, 422, None),
    ],
)
def test_bad_retries_are_refused_and_write_nothing(
    as_alice: Api, session: Session, body: Any, status: int, code: str | None
):
    failed(as_alice, session, "fault 401")
    session.refresh_from_db()
    before = session.last_seq
    response = as_alice.post(f"/sessions/{session.id}/retry", body)
    assert response.status_code == status
    error = body_of(response)
    assert {"error", "detail"} <= set(error) and (code is None or error["error"] == code)
    session.refresh_from_db()
    assert session.last_seq == before


def test_only_the_owner_may_retry(as_alice: Api, as_bob: Api, session: Session):
    entry_id = failed(as_alice, session, "fault 403")
    response = as_bob.post(f"/sessions/{session.id}/retry", {"entry_id": entry_id})
    assert response.status_code == 404
    assert [e.type for e in store.events_after(session.id)].count("turn/start") == 1
