"""The Content-Security-Policy: every page is sent with the strict policy and holds nothing it
would refuse (no inline script, no event-handler attribute, no style attribute or element);
the HTML export, a download with its own inline script, gets a sandboxed policy of its own.

The pages are those of a session with a real turn (trace spans, context messages with their
token bars), a markdown table, and the admin's pages over it.
"""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client

from sessions_app import agent, services, store
from sessions_app.models import RequestAudit, Session
from sessions_app.web.views import EXPORT_CONTENT_SECURITY_POLICY
from tests.api.conftest import user_msg, wait_idle

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = "| name | count |\n|:--|--:|\n| alpha | 1 |"


class RefusedByPolicy(HTMLParser):
    """Collects what a policy without 'unsafe-inline' would refuse to run or apply."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}={value!r}>")
            elif name == "style":
                self.found.append(f"<{tag} style={value!r}>")
            elif name in {"href", "src", "action", "formaction"} and (
                (value or "").strip().lower().startswith("javascript:")
            ):
                self.found.append(f"<{tag} {name}={value!r}>")
        if tag == "script" and not named.get("src") and named.get("type") != "application/json":
            self.found.append(f"<script {named}> without src")
        if tag == "style":
            self.found.append("<style> element")
        if any(name.startswith("hx-on") for name in named):
            self.found.append(f"<{tag}> with hx-on (htmx evaluates it as code)")


@pytest.fixture(scope="module", autouse=True)
def _agent_stopped_after_the_module(django_db_setup: Any) -> Iterator[None]:
    # The agent's database threads hold connections of their own: closed before the test
    # database is dropped (the next test to run a turn starts the agent again).
    yield
    agent.agent_shutdown()


def refused(html: str) -> list[str]:
    parser = RefusedByPolicy()
    parser.feed(html)
    parser.close()
    return parser.found


@pytest.mark.parametrize(
    ("html", "found"),
    [
        ('<script src="/static/a.js"></script><script type="application/json">{}</script>', 0),
        ("<script>alert(1)</script>", 1),
        ('<script type="module">x()</script>', 1),
        ('<button onclick="x()">b</button>', 1),
        ('<div style="color: red">x</div>', 1),
        ("<style>p { color: red }</style>", 1),
        ('<a href=" JavaScript:x()">a</a>', 1),
        ('<form hx-on::after-request="x()"></form>', 1),
        ('<svg><rect x="1" width="2" height="3"/></svg><p class="on-path">x</p>', 0),
    ],
)
def test_the_check_finds_what_the_policy_refuses(html: str, found: int) -> None:
    assert len(refused(html)) == found, refused(html)


def directives(header: str) -> dict[str, list[str]]:
    parsed: dict[str, list[str]] = {}
    for part in header.split(";"):
        name, *values = part.split()
        parsed[name] = values
    return parsed


def assert_strict_policy(response: Any, url: str) -> None:
    header = response.headers.get("Content-Security-Policy")
    assert header, f"{url}: no Content-Security-Policy"
    policy = directives(header)
    for name in ("default-src", "script-src", "style-src", "connect-src", "form-action"):
        assert policy[name] == ["'self'"], f"{url}: {name} {policy.get(name)}"
    for name in ("object-src", "base-uri", "frame-ancestors"):
        assert policy[name] == ["'none'"], f"{url}: {name} {policy.get(name)}"
    assert "'unsafe-inline'" not in header and "'unsafe-eval'" not in header, url


@pytest.fixture
def turn_session(alice: Any) -> Session:
    """Alice's session after one turn of the offline model, and a message with a markdown
    table."""
    session = services.session_create(owner=alice, title="Policy check")
    agent.agent_send_message(session, "hello there")
    wait_idle(session)
    session.refresh_from_db()
    store.append_events(session.id, session.last_seq, [user_msg(TABLE)])
    return session


def test_pages_carry_the_policy_and_nothing_inline_it_would_refuse(
    alice: Any, turn_session: Session
) -> None:
    anonymous = Client()
    login = anonymous.get("/accounts/login/")
    assert login.status_code == 200
    assert_strict_policy(login, "/accounts/login/")
    assert refused(login.content.decode()) == []

    client = Client()
    client.force_login(alice)
    base = f"/sessions/{turn_session.id}/"
    urls = [
        "/",
        "/?q=notes",
        base,
        base + "?view=trace",
        base + "?view=context",
        base + "?tree=1",
        base + "delete",
        base + f"compare?b={turn_session.leaf_entry_id}",
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        assert_strict_policy(response, url)
        assert refused(response.content.decode()) == [], url

    trace = client.get(base + "?view=trace").content.decode()
    assert 'class="span-bar"' in trace  # the spans are there, drawn without style attributes
    context = client.get(base + "?view=context").content.decode()
    assert 'class="tok-bar"' in context
    chat = client.get(base).content.decode()
    assert '<th class="align-right">count</th>' in chat


def test_htmx_fragments_hold_nothing_inline_either(alice: Any, turn_session: Session) -> None:
    client = Client()
    client.force_login(alice)
    base = f"/sessions/{turn_session.id}/"
    for url in (base + "?view=trace", base + "?view=context", base, base + "?fragment=live"):
        response = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="view")
        assert response.status_code == 200, url
        html = response.content.decode()
        assert 'id="view"' in html and "<html" not in html, url  # a fragment indeed
        assert refused(html) == [], url


def test_admin_pages_carry_the_policy_and_nothing_inline(
    admin_user: Any, turn_session: Session
) -> None:
    client = Client()
    client.force_login(admin_user)
    audit = RequestAudit.objects.filter(session_id=turn_session.id).order_by("seq")
    urls = [
        "/admin/",
        "/admin/sessions_app/session/",
        f"/admin/sessions_app/session/{turn_session.id}/change/",
        "/admin/sessions_app/event/",
        "/admin/sessions_app/requestaudit/",
        "/admin/sessions_app/requestaudit/?changes=header",
        f"/admin/sessions_app/requestaudit/?session={turn_session.id}",
        "/admin/sessions_app/requestaudit/usage/",
        *(f"/admin/sessions_app/requestaudit/{row.pk}/change/" for row in audit),
        "/admin/auth/user/",
        f"/admin/auth/user/{admin_user.pk}/change/",
    ]
    assert len(urls) > 8  # the audit rows of the turn are among them
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        assert_strict_policy(response, url)
        assert refused(response.content.decode()) == [], url
    checked = client.post(
        "/admin/sessions_app/requestaudit/",
        {"action": "check_integrity", "_selected_action": [str(row.pk) for row in audit]},
    )
    assert "Payload hashes checked" in checked.content.decode()
    assert_strict_policy(checked, "the integrity action")
    assert refused(checked.content.decode()) == []
    signed_out = Client().get("/admin/login/")
    assert_strict_policy(signed_out, "/admin/login/")
    assert refused(signed_out.content.decode()) == []


def test_api_docs_carry_the_policy_and_pass_their_settings_as_json(alice: Any) -> None:
    client = Client()
    client.force_login(alice)
    response = client.get("/api/docs")
    assert response.status_code == 200
    assert_strict_policy(response, "/api/docs")
    html = response.content.decode()
    assert '<script type="application/json" id="swagger-settings">' in html
    assert refused(html) == []


def test_the_html_export_gets_a_sandboxed_policy_of_its_own(
    alice: Any, turn_session: Session
) -> None:
    client = Client()
    client.force_login(alice)
    response = client.get(f"/sessions/{turn_session.id}/export.html")
    assert response.status_code == 200
    assert response.headers["Content-Disposition"].startswith("attachment;")
    header = response.headers["Content-Security-Policy"]
    assert header == EXPORT_CONTENT_SECURITY_POLICY
    policy = directives(header)
    # Its inline script may run, but only in an opaque origin: no allow-same-origin, so it
    # cannot read Strand's cookies or call its pages, and it may load nothing.
    assert policy["sandbox"] == ["allow-scripts", "allow-downloads"]
    assert policy["default-src"] == ["'none'"] and "connect-src" not in policy
    assert policy["frame-ancestors"] == ["'none'"]
