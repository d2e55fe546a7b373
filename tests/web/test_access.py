"""Who may see and change a session through the pages: owner, another user, staff, nobody."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from sessions_app.models import Entry, Session
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db

READS = [
    ("session", ""),
    ("session", "?view=trace"),
    ("session", "?view=context"),
    ("session", "?view=files"),
    ("session-export-html", ""),
    ("session-export-jsonl", ""),
    ("session-workspace-tar", ""),
    ("session-delete", ""),  # the confirmation page (owner only)
]
WRITES = [
    ("session-rename", {"title": "Mine now"}),
    ("session-leaf", {"entry_id": ""}),
    ("session-label", {"entry_id": "x", "label": "y"}),
    ("session-messages", {"text": "hi"}),
    ("session-resend", {"entry_id": "x", "text": "hi"}),
    ("session-cancel", {}),
    ("session-compact", {}),
    ("session-leaf-summary", {"entry_id": "", "summarize": "on"}),
    ("session-workspace-upload", {}),
    ("session-delete", {}),
]


def url(name: str, session: Session) -> str:
    name = "session-send" if name == "session-messages" else name
    return reverse(name, args=[session.id])


@pytest.mark.parametrize("name,query", READS)
def test_anonymous_is_sent_to_sign_in(talk: Session, name: str, query: str) -> None:
    response = client_for(None).get(url(name, talk) + query)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("name,query", READS)
def test_another_user_gets_not_found(talk: Session, bob: User, name: str, query: str) -> None:
    response = client_for(bob).get(url(name, talk) + query)
    assert response.status_code == 404
    assert talk.title.encode() not in response.content


@pytest.mark.parametrize("name,data", WRITES)
def test_another_user_cannot_change_anything(
    talk: Session, bob: User, name: str, data: dict[str, str]
) -> None:
    before = talk.last_seq
    response = client_for(bob).post(url(name, talk), data)
    assert response.status_code == 404
    talk.refresh_from_db()
    assert talk.last_seq == before and talk.title == "Alice's talk"


@pytest.mark.parametrize("name,query", READS[:-1])
def test_staff_may_read(talk: Session, carol: User, name: str, query: str) -> None:
    assert client_for(carol).get(url(name, talk) + query).status_code == 200


def test_staff_page_is_read_only(talk: Session, carol: User) -> None:
    html = client_for(carol).get(url("session", talk)).content.decode()
    assert "Read-only" in html
    assert 'id="composer"' not in html and 'id="leaf-form"' not in html
    assert "alice’s session, read-only" in html
    # Tree nodes are links to look at a branch, not buttons that move the leaf.
    assert '<a class="node-text" href="?view=chat&amp;leaf=' in html


@pytest.mark.parametrize("name,data", WRITES)
def test_staff_cannot_change_anything(
    talk: Session, carol: User, name: str, data: dict[str, str]
) -> None:
    before = talk.last_seq
    response = client_for(carol).post(url(name, talk), data)
    assert response.status_code == 403
    talk.refresh_from_db()
    assert talk.last_seq == before


def test_staff_sees_everyone_in_the_list_with_owners(talk: Session, carol: User) -> None:
    html = client_for(carol).get("/").content.decode()
    assert "Alice&#x27;s talk" in html and "· alice" in html


def test_staff_may_fork_into_a_session_of_their_own(talk: Session, carol: User) -> None:
    first = Entry.objects.filter(session=talk).order_by("seq").first()
    assert first is not None
    client_for(carol).post(url("session-fork", talk), {"entry_id": first.entry_id})
    assert Session.objects.get(parent=talk).owner == carol


def test_posts_need_a_csrf_token(talk: Session) -> None:
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(talk.owner)
    response = client.post(url("session-rename", talk), {"title": "x"})
    assert response.status_code == 403
