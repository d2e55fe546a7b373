"""Replaying a recorded request through the API (and landing on its pages): what is
answered, every refusal with nothing written, several replays at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from sessions_app import agent, services, store
from sessions_app.models import Session
from sessions_app.store import NewEvent
from tests.api.conftest import OFFLINE_PRESET, Api, body_of, wait_for, wait_idle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def session(alice: Any, workspace: Path) -> Session:
    return services.session_create(
        owner=alice, title="work", cwd=str(workspace), preset=OFFLINE_PRESET
    )


@pytest.fixture
def other_preset(serve_preset: Any) -> str:
    return str(serve_preset("other", **{**services.DEFAULT_PRESET, "model": "strand-offline-2"}))


def answered(api: Api, session: Session, text: str = "hello") -> int:
    """Run a turn; the seq of its last request."""
    assert api.post(f"/sessions/{session.id}/messages", {"text": text}).status_code == 202
    wait_idle(session)
    return requests_of(session)[-1]


def requests_of(session: Session) -> list[int]:
    return [e.seq for e in store.events_after(session.id, -1, 10_000) if e.type == "request/sent"]


def last_seq(session: Session) -> int:
    session.refresh_from_db(fields=["last_seq"])
    return session.last_seq


def page_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_replay_answers_202_and_its_compare_url_leads_to_the_comparison(
    as_alice: Api, session: Session, alice: Any, other_preset: str
) -> None:
    seq = answered(as_alice, session)
    path = f"/sessions/{session.id}/requests/{seq}/replay"
    response = as_alice.post(path, {"preset": other_preset, "params": {"temperature": 0.3}})
    assert response.status_code == 202, response.content
    started = body_of(response)
    assert started["turns"] == [started["group"]] and started["request_seq"] == seq
    assert started["group_url"] == f"/sessions/{session.id}/replays/{started['group']}"
    assert started["compare_url"] == started["group_url"] + "?then=compare"
    wait_idle(session)

    header = [e for e in store.events_after(session.id, -1, 10_000) if e.type == "request/header"]
    assert header[-1].data["reason"] == "replay"
    assert header[-1].data["replay_of"] == seq
    assert header[-1].data["overrides"] == ["params.temperature"]
    assert header[-1].data["params"]["temperature"] == 0.3

    # The compare URL, once the replay has answered, is the comparison of the two answers.
    landed = page_client(alice).get(started["compare_url"])
    assert landed.status_code == 302
    target = landed["Location"]
    assert target.startswith(f"/sessions/{session.id}/compare?a=")
    page = page_client(alice).get(target)
    assert page.status_code == 200
    assert b"Two branches compared" in page.content


def test_refusals_answer_json_and_write_nothing(
    as_alice: Api, as_bob: Api, as_carol: Api, anonymous: Api, session: Session
) -> None:
    seq = answered(as_alice, session)
    path = f"/sessions/{session.id}/requests/{seq}/replay"
    before = last_seq(session)

    def refused(api: Api, url: str, body: Any, status: int, code: str | None = None) -> None:
        response = api.post(url, body)
        assert response.status_code == status, (body, response.content)
        error = body_of(response)
        assert isinstance(error["detail"], str) and error["detail"]
        if code is not None:
            assert error["error"] == code

    refused(as_alice, f"/sessions/{session.id}/requests/{seq + 1}/replay", {}, 404, "not_found")
    refused(as_alice, f"/sessions/{session.id}/requests/0/replay", {}, 404, "not_found")
    refused(as_alice, f"/sessions/{session.id}/requests/{2**70}/replay", {}, 404)
    refused(as_alice, path, {"preset": "no-such-preset"}, 422, "not_allowed")
    refused(as_alice, path, {"params": {"base_url": 1}}, 422)
    refused(as_alice, path, {"params": {"temperature": 7}}, 422)
    refused(as_alice, path, {"params": {"max_tokens": 1.5}}, 422)
    refused(as_alice, path, {"thinking_level": "enormous"}, 422)
    refused(as_alice, path, {"count": 6}, 422, "validation_error")
    refused(as_alice, path, {"presets": [OFFLINE_PRESET] * 3, "count": 2}, 422)
    refused(as_alice, path, {"preset": OFFLINE_PRESET, "presets": [OFFLINE_PRESET]}, 422)
    refused(as_bob, path, {}, 404, "not_found")
    refused(as_carol, path, {}, 403, "forbidden")
    refused(anonymous, path, {}, 401, "unauthorized")
    assert last_seq(session) == before

    # A turn waiting for an approval holds the lock: 409, and nothing written.
    assert (
        as_alice.post(
            f"/sessions/{session.id}/messages", {"text": "write notes.txt: changed"}
        ).status_code
        == 202
    )
    wait_for(lambda: agent.agent_pending_approvals(session))
    waiting = last_seq(session)
    refused(as_alice, path, {}, 409, "conflict")
    assert last_seq(session) == waiting


def test_a_request_whose_hash_does_not_match_is_refused_with_409(
    as_alice: Api, session: Session
) -> None:
    seq = answered(as_alice, session)
    sent = store.events_after(session.id, seq - 1, 1)[0]
    forged = {**sent.data, "payload_sha256": "f" * 64}
    at = last_seq(session)
    store.append_events(session.id, at, [NewEvent("request/sent", forged)])
    response = as_alice.post(f"/sessions/{session.id}/requests/{at + 1}/replay", {})
    assert response.status_code == 409
    assert body_of(response)["error"] == "payload_mismatch"
    assert last_seq(session) == at + 1


def test_replays_are_rate_limited(as_alice: Api, session: Session, settings: Any) -> None:
    settings.STRAND_RATE_LIMITS = {"replay": (1, 60)}
    seq = answered(as_alice, session)
    path = f"/sessions/{session.id}/requests/{seq}/replay"
    assert as_alice.post(path, {}).status_code == 202
    wait_idle(session)
    before = last_seq(session)
    response = as_alice.post(path, {})
    assert response.status_code == 429 and response["Retry-After"]
    assert last_seq(session) == before


def test_several_replays_run_in_turn_and_show_side_by_side(
    as_alice: Api, session: Session, alice: Any, carol: Any, other_preset: str
) -> None:
    seq = answered(as_alice, session)
    response = as_alice.post(
        f"/sessions/{session.id}/requests/{seq}/replay",
        {"presets": [OFFLINE_PRESET, other_preset], "count": 2},
    )
    assert response.status_code == 202
    started = body_of(response)
    assert len(started["turns"]) == 4
    wait_idle(session)
    # The side-by-side page: four answers and the original, each with its compare link.
    for user in (alice, carol):  # staff read it too
        page = page_client(user).get(started["group_url"])
        assert page.status_code == 200
        text = page.content.decode()
        assert text.count("Compare with the original") == 4
        assert "strand-offline-2" in text and 'http-equiv="refresh"' not in text
    # A group page of a group of several does not jump to one comparison.
    assert page_client(alice).get(started["compare_url"]).status_code == 200
    assert page_client(alice).get(f"/sessions/{session.id}/replays/{seq}").status_code == 404


def test_a_session_working_outside_its_owners_folder_is_not_replayed(
    as_alice: Api, session: Session, tmp_path: Path
) -> None:
    seq = answered(as_alice, session)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    Session.objects.filter(id=session.id).update(cwd=str(elsewhere))
    before = last_seq(session)
    response = as_alice.post(f"/sessions/{session.id}/requests/{seq}/replay", {})
    assert response.status_code == 403
    assert body_of(response)["error"] == "workspace_not_allowed"
    assert last_seq(session) == before
