"""Under the Content-Security-Policy, in Chromium: the pages, the live feed over the websocket,
the admin and the API docs work, and the browser reports no violation of the policy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import ConsoleMessage, Page, expect

from sessions_app.models import RequestAudit, Session
from tests.browser.conftest import (
    Server,
    new_session,
    screenshot,
    send,
    sign_in,
    wait_turn,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Runs before any page script (Playwright injects it past the policy): keeps every violation
# the page reports, with what was refused and by which directive.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.effectiveDirective + " refused " + (e.blockedURI || "inline")
    + " at " + e.sourceFile + ":" + e.lineNumber);
});
"""


class Violations:
    """What Chromium reported about the policy, on the console and as events."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.console: list[str] = []
        page.add_init_script(RECORD_VIOLATIONS)
        page.on("console", self._on_console)

    def _on_console(self, message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            self.console.append(message.text)

    def assert_none(self, where: str) -> None:
        events = self.page.evaluate("window.__cspViolations || []")
        assert self.console == [] and events == [], (where, self.console, events)


@pytest.fixture
def watched(page: Page) -> Iterator[tuple[Page, Violations]]:
    yield page, Violations(page)


def test_the_session_pages_and_the_live_feed_work_under_the_policy(
    watched: tuple[Page, Violations], server: Server, make_user: Any
) -> None:
    page, violations = watched
    sign_in(page, server, make_user())
    violations.assert_none("sign-in")
    url = new_session(page, "Under the policy")  # waits for the websocket: connect-src 'self'
    send(page, "list files and read README.md")
    page.wait_for_function("() => window.strandLive.deltas > 0")  # streamed over the socket
    wait_turn(page)
    expect(page.locator("textarea[data-composer]")).to_have_value("")  # cleared by strand.js
    expect(page.locator("#chat .msg.assistant[data-entry]").last).to_contain_text(
        "Here is what I found"
    )
    violations.assert_none("chat")

    page.click("[data-view-tab=trace]")
    expect(page.locator(".turn-block")).to_have_count(1)
    box = page.locator(".span-bar").first.bounding_box()  # drawn without style attributes
    assert box is not None and box["width"] > 0
    page.locator(".span-name").first.click()
    expect(page.locator("#span-detail h3")).to_be_visible()
    violations.assert_none("trace")

    page.keyboard.press("3")
    expect(page.locator("#hash-badge")).to_have_attribute("data-matches", "true")
    expect(page.locator(".tok-bar").first).to_be_visible()
    violations.assert_none("context")

    page.goto(url + "?tree=1")
    page.keyboard.press("?")
    expect(page.locator("#help")).to_be_visible()
    page.keyboard.press("Escape")
    page.goto(server.url + "/")
    expect(page.locator("#session-rows")).to_contain_text("Under the policy")
    violations.assert_none("list")
    screenshot(page, "csp-01-pages-under-the-policy")


def test_the_admin_and_the_api_docs_work_under_the_policy(
    watched: tuple[Page, Violations], server: Server, make_user: Any, db_access: None
) -> None:
    page, violations = watched
    owner = make_user()
    sign_in(page, server, owner)
    new_session(page, "Audited under the policy")
    send(page, "read README.md")
    wait_turn(page)
    session = Session.objects.get(owner=owner)
    audit = RequestAudit.objects.filter(session_id=session.id, type="request/sent").first()
    assert audit is not None

    admin: User = make_user("admin", staff=True)
    admin.is_superuser = True
    admin.save(update_fields=["is_superuser"])
    page.context.clear_cookies()
    sign_in(page, server, admin)
    for path, visible in [
        ("/admin/", "#content-main"),
        ("/admin/sessions_app/session/", "#result_list"),
        (f"/admin/sessions_app/session/{session.id}/change/", "#content-main form"),
        ("/admin/sessions_app/requestaudit/", "#result_list"),
        (f"/admin/sessions_app/requestaudit/{audit.pk}/change/", ".strand-audit"),
        ("/admin/auth/user/", "#result_list"),
    ]:
        page.goto(server.url + path)
        expect(page.locator(visible).first).to_be_visible()
        violations.assert_none(path)
    # The admin's own scripts run: the changelist's select-all box ticks every row.
    page.goto(server.url + "/admin/auth/user/")
    page.click("#action-toggle")
    expect(page.locator("input.action-select").first).to_be_checked()
    # The audit page's styles come from the stylesheet: a matching hash is drawn green.
    page.goto(server.url + f"/admin/sessions_app/requestaudit/{audit.pk}/change/")
    badge = page.locator(".strand-audit .badge.ok")
    expect(badge).to_be_visible()
    assert badge.evaluate("e => getComputedStyle(e).fontWeight") == "700"
    violations.assert_none("admin scripts")

    page.goto(server.url + "/api/docs")
    expect(page.locator(".swagger-ui .info .title")).to_be_visible()
    page.locator(".opblock-summary").first.click()
    expect(page.locator(".opblock-body").first).to_be_visible()
    violations.assert_none("/api/docs")
    screenshot(page, "csp-02-api-docs-under-the-policy")
