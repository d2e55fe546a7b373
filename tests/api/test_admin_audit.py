"""The admin's request audit: staff list every session's model requests, filter them by
user, provider, model and date, and open the exact context of one."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.html import escape

from sessions_app import agent, services, workspaces
from sessions_app.models import RequestAudit, Session
from tests.api.conftest import OFFLINE_PRESET, wait_idle

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/sessions_app/requestaudit/"
HOSTILE = "<script>alert('audit')</script>"


def run_turn(owner: Any, title: str, text: str, cwd: Path) -> Session:
    session = services.session_create(owner=owner, title=title, cwd=str(cwd), preset=OFFLINE_PRESET)
    agent.agent_send_message(session, text)
    wait_idle(session)
    return session


@pytest.fixture
def audited(alice: Any, bob: Any, workspace: Path) -> tuple[Session, Session]:
    return (
        run_turn(alice, "Alice audited", f"read notes.txt {HOSTILE}", workspace),
        run_turn(bob, "Bob audited", "hello there", Path(workspaces.default_cwd(bob))),
    )


@pytest.fixture
def staff(carol: Any) -> Client:
    client = Client()
    client.force_login(carol)  # staff, not a superuser: no model permissions granted
    return client


def test_staff_list_every_sessions_requests(
    staff: Client, audited: tuple[Session, Session]
) -> None:
    alice_session, bob_session = audited
    page = staff.get(LIST)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Alice audited" in html and "Bob audited" in html
    rows = RequestAudit.objects.all()
    assert {r.type for r in rows} == {"request/header", "request/sent"}
    assert {r.provider for r in rows} == {"offline"} and {r.model for r in rows} == {
        "strand-offline-1"
    }
    sent = rows.filter(session_id=alice_session.id, type="request/sent")
    assert sent.count() == 2 and all(r.header_seq is not None for r in sent)


FILTERS = [
    ("owner__id__exact={bob}", False, True),
    ("owner__id__exact={alice}", True, False),
    ("provider=offline", True, True),
    ("provider=anthropic", False, False),
    ("model=strand-offline-1", True, True),
    ("type__exact=request%2Fsent", True, True),
    ("time__gte={today}&time__lt={tomorrow}", True, True),
    ("time__gte={tomorrow}", False, False),
    ("q=Bob", False, True),
]


def results(html: str) -> str:
    """The list's rows (the filters beside them name sessions too); "" when none."""
    start = html.find('<table id="result_list"')
    return html[start : html.index("</table>", start)] if start >= 0 else ""


def test_filters_by_user_provider_model_and_date(
    staff: Client, audited: tuple[Session, Session], alice: Any, bob: Any
) -> None:
    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    days = {"today": quote(str(today)), "tomorrow": quote(str(today + timedelta(days=1)))}
    for query, alice_shown, bob_shown in FILTERS:
        url = LIST + "?" + query.format(alice=alice.pk, bob=bob.pk, **days)
        page = staff.get(url)
        assert page.status_code == 200, url
        html = results(page.content.decode())
        assert ("Alice audited" in html) == alice_shown, url
        assert ("Bob audited" in html) == bob_shown, url
    filters = staff.get(LIST).content.decode()
    assert "?provider=offline" in filters and "?model=strand-offline-1" in filters


def test_one_request_shows_its_exact_context(
    staff: Client, audited: tuple[Session, Session]
) -> None:
    alice_session, _ = audited
    row = RequestAudit.objects.filter(session_id=alice_session.id, type="request/sent").order_by(
        "seq"
    )[0]
    page = staff.get(f"{LIST}{row.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "matches" in html and "does not match" not in html
    assert escape(services.DEFAULT_PRESET["system_prompt"]) in html
    # The tool schemas: Pi's (the default tools).
    assert "Read the contents of a file." in html and "exact text replacement" in html
    assert "&lt;script&gt;alert(&#x27;audit&#x27;)&lt;/script&gt;" in html
    assert HOSTILE not in html


def test_a_header_lists_the_requests_sent_under_it(
    staff: Client, audited: tuple[Session, Session]
) -> None:
    alice_session, _ = audited
    header = RequestAudit.objects.get(session_id=alice_session.id, type="request/header")
    html = staff.get(f"{LIST}{header.pk}/change/").content.decode()
    for sent in RequestAudit.objects.filter(session_id=alice_session.id, type="request/sent"):
        assert f"{LIST}{sent.pk}/change/" in html
    assert staff.get(f"{LIST}999999999/change/").status_code == 404


def test_the_audit_is_for_staff_only(audited: tuple[Session, Session], alice: Any) -> None:
    # A signed-in user who is not staff is told there is nothing there; a visitor is sent
    # to the admin's sign-in.
    owner = Client()
    owner.force_login(alice)
    assert owner.get(LIST).status_code == 404
    row = RequestAudit.objects.first()
    assert row is not None
    assert owner.get(f"{LIST}{row.pk}/change/").status_code == 404
    assert Client().get(LIST).status_code == 302


def test_the_audit_is_read_only(staff: Client, audited: tuple[Session, Session]) -> None:
    row = RequestAudit.objects.first()
    assert row is not None
    assert staff.get(f"{LIST}add/").status_code == 403
    assert staff.post(f"{LIST}{row.pk}/delete/").status_code == 403
