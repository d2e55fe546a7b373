"""The replay pages: the "Replay…" form of a recorded request (owners replay, staff read),
the answers side by side, and the links to them from the context view, the trace and the
audit desk."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from sessions_app import agent, services, store, workspaces
from sessions_app.models import Session
from sessions_app.services import replay
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _agent(fast_offline_model: None, agent_shutdown: None) -> Iterator[None]:
    yield
    agent.agent_stop_local_runs()


@pytest.fixture
def ran(alice: User) -> tuple[Session, int]:
    """Alice's session after one turn; the seq of its request."""
    Path(workspaces.default_cwd(alice)).mkdir(parents=True, exist_ok=True)
    session = services.session_create(owner=alice, title="Replays", cwd="")
    agent.agent_send_message(session.id, "hello <b>there</b>")
    agent.agent_wait(session.id, 20)
    seq = [e.seq for e in store.events_after(session.id, -1, 1000) if e.type == "request/sent"]
    session.refresh_from_db()
    return session, seq[-1]


def last_seq(session: Session) -> int:
    session.refresh_from_db(fields=["last_seq"])
    return session.last_seq


def test_the_owner_replays_from_the_form_and_lands_on_the_comparison(
    ran: tuple[Session, int], alice: User
) -> None:
    session, seq = ran
    client = client_for(alice)
    context = client.get(f"/sessions/{session.id}/?view=context")
    replay_url = f"/sessions/{session.id}/requests/{seq}/replay"
    assert replay_url in context.content.decode()
    form = client.get(replay_url)
    assert form.status_code == 200 and b'id="replay-form"' in form.content
    posted = client.post(replay_url, {"presets": ["offline"], "count": "1", "temperature": "0.5"})
    assert posted.status_code == 303
    group_url = posted["Location"]
    assert group_url.endswith("?then=compare")
    agent.agent_wait(session.id, 20)
    landed = client.get(group_url)
    assert landed.status_code == 302
    assert landed["Location"].startswith(f"/sessions/{session.id}/compare?a=")
    # Without `then`, the group page itself: finished, so it no longer reloads.
    page = client.get(group_url.split("?")[0])
    assert page.status_code == 200
    text = page.content.decode()
    assert "Compare with the original" in text and "params.temperature" in text
    assert 'http-equiv="refresh"' not in text
    assert "<b>there</b>" not in text  # text from the conversation is escaped
    # Every view of the session, and the audit desk, show the replay's turn as any other.
    for view in ("chat", "trace", "context"):
        assert client.get(f"/sessions/{session.id}/?view={view}").status_code == 200


def test_bad_input_and_a_running_turn_are_refused_with_the_form_again(
    ran: tuple[Session, int], alice: User
) -> None:
    session, seq = ran
    client = client_for(alice)
    url = f"/sessions/{session.id}/requests/{seq}/replay"
    before = last_seq(session)
    bad = client.post(url, {"presets": ["offline"], "count": "1", "temperature": "5"})
    assert bad.status_code == 422 and b'id="replay-form"' in bad.content
    many = client.post(url, {"presets": ["offline"], "count": "9"})
    assert many.status_code == 422
    unknown = client.post(url, {"presets": ["nope"], "count": "1"})
    assert unknown.status_code == 422
    assert last_seq(session) == before

    agent.agent_send_message(session.id, "write notes.txt: hi")  # waits for approval
    deadline = time.monotonic() + 20
    while not agent.agent_pending_approvals(session.id):
        assert time.monotonic() < deadline, "no approval asked"
        time.sleep(0.05)
    waiting = last_seq(session)
    busy = client.post(url, {"presets": ["offline"], "count": "1"})
    assert busy.status_code == 409
    assert b"turn is running" in busy.content
    assert last_seq(session) == waiting


def test_staff_see_the_page_but_not_the_form_and_others_see_nothing(
    ran: tuple[Session, int], bob: User, carol: User
) -> None:
    session, seq = ran
    url = f"/sessions/{session.id}/requests/{seq}/replay"
    staff = client_for(carol)
    page = staff.get(url)
    assert page.status_code == 200
    assert b'id="replay-read-only"' in page.content and b'id="replay-form"' not in page.content
    assert b'id="replay-link"' not in staff.get(f"/sessions/{session.id}/?view=context").content
    before = last_seq(session)
    assert staff.post(url, {"presets": ["offline"], "count": "1"}).status_code == 403
    assert last_seq(session) == before
    other = client_for(bob)
    assert other.get(url).status_code == 404
    assert other.post(url, {"presets": ["offline"], "count": "1"}).status_code == 404
    assert client_for(None).get(url).status_code == 302  # to sign in
    assert staff.get(f"/sessions/{session.id}/requests/{seq + 1}/replay").status_code == 404
    assert staff.get(f"/sessions/{session.id}/replays/{seq}").status_code == 404


def test_the_audit_detail_offers_the_replay_page_to_staff_as_owner_only(
    ran: tuple[Session, int], carol: User
) -> None:
    from sessions_app.selectors.audit import audit_row_at

    session, seq = ran
    row = audit_row_at(session.id, seq)
    assert row is not None
    staff = client_for(carol)
    page = staff.get(f"/admin/sessions_app/requestaudit/{row.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert f"/sessions/{session.id}/requests/{seq}/replay" in text
    assert "Replay… (owner only)" in text
    # A replay's header is listed and opens like any other.
    replay.replay_start(session, seq, replay.replay_plans(preset_names=["offline"]))
    agent.agent_wait(session.id, 20)
    header = [e for e in store.events_after(session.id, seq, 1000) if e.type == "request/header"]
    assert header and header[-1].data["reason"] == "replay"
    listed = staff.get(f"/admin/sessions_app/requestaudit/?session={session.id}")
    assert listed.status_code == 200
    header_row = audit_row_at(session.id, header[-1].seq)
    assert header_row is not None
    detail = staff.get(f"/admin/sessions_app/requestaudit/{header_row.pk}/change/")
    assert detail.status_code == 200
