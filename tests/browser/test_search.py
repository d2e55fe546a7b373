"""Search in Chromium: find a message, click the result, and the session opens on the
branch through that entry, scrolled to it and marked."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from sessions_app import services, store
from sessions_app.models import Entry
from sessions_app.store import NewEvent
from tests.browser.conftest import Server, screenshot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def message(role: str, text: str) -> NewEvent:
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    kind = "user/message" if role == "user" else "assistant/message"
    return NewEvent(
        kind, {"entry": {"type": "message", "message": {"role": role, "content": content}}}
    )


def test_search_click_a_result_and_the_session_opens_at_that_entry(
    page: Page, server: Server, make_user: Any
) -> None:
    user: User = make_user()
    session = services.session_create(owner=user, title="Garden plans")
    session.refresh_from_db()
    texts = [
        ("user", "What should I plant in spring?"),
        ("assistant", "Tomatoes and the rare blue kohlrabi do well in spring."),
        ("user", "And in autumn?"),
        ("assistant", "Garlic and broad beans."),
    ]
    store.append_events(session.id, session.last_seq, [message(r, t) for r, t in texts])
    ids = list(
        Entry.objects.filter(session=session).order_by("seq").values_list("entry_id", flat=True)
    )
    # The projector does not run in these servers: the entry is found in the tail.
    sign_in(page, server, user)
    page.click("#nav-search")
    page.fill("input[name=q]", "blue kohlrabi")
    page.keyboard.press("Enter")
    results = page.locator("#search-results .search-hit")
    expect(results).to_have_count(1)
    expect(results.first.locator("mark")).to_have_text(["blue", "kohlrabi"])
    screenshot(page, "search-results")
    results.first.locator("a.hit-link").click()
    target = page.locator(f"#entry-{ids[1]}")
    expect(target).to_be_visible()
    expect(target).to_have_class(re.compile(r"\btarget\b"))
    # The branch shown ends at the entry found: the later messages are not on it.
    expect(page.locator(f"#entry-{ids[3]}")).to_have_count(0)
    assert f"leaf={ids[1]}" in page.url
    screenshot(page, "search-opened-at-entry")
