"""Comparing two branches from the tree: mark one node, compare another with it, read the
rows on; the same with JavaScript off; and the page following the session live."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect

from sessions_app import services, store
from sessions_app.models import Session
from sessions_app.store import NewEvent
from tests.browser.conftest import Server, screenshot, sign_in, wait_live

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def message(role: str, text: str) -> NewEvent:
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    kind = "user/message" if role == "user" else "assistant/message"
    return NewEvent(
        kind, {"entry": {"type": "message", "message": {"role": role, "content": content}}}
    )


def append(session: Session, events: list[NewEvent]) -> list[str]:
    session.refresh_from_db()
    ids = store.append_events(session.id, session.last_seq, events).entry_ids
    session.refresh_from_db()
    return list(ids)


def two_tries(owner: User) -> tuple[Session, dict[str, str]]:
    """A shared question and answer; branch A of 60 entries; branch B of two, where the
    current leaf is."""
    session = services.session_create(owner=owner, title="Two tries", cwd="")
    _, shared = append(session, [message("user", "the question"), message("assistant", "a look")])
    a_ids = append(
        session, [message("assistant" if i % 2 else "user", f"A step {i}") for i in range(60)]
    )
    moved = NewEvent("leaf/moved", {"to": shared, "reason": "navigate"})
    b_ids = append(session, [moved, message("user", "B asks"), message("assistant", "B answers")])
    return session, {"ancestor": shared, "a": a_ids[-1], "b": b_ids[-1]}


def pick_two_and_compare(page: Page, server: Server, session: Session, ids: dict[str, str]) -> None:
    page.goto(f"{server.url}/sessions/{session.id}/")
    page.locator(f"#node-{ids['a']} .node-more").click()
    page.locator("#node-panel .mark-compare").click()
    expect(page.locator("#tree-mark")).to_contain_text(ids["a"])
    expect(page.locator(f"#node-{ids['a']}")).to_have_class(re.compile("marked"))
    page.locator(f"#node-{ids['b']} .node-more").click()
    page.locator("#node-panel .compare-marked").click()
    expect(page).to_have_url(re.compile(rf"/compare\?a={ids['a']}&b={ids['b']}$"))
    summary = page.locator(".compare-summary")
    expect(summary).to_contain_text(f"They share everything down to {ids['ancestor']}")
    expect(summary).to_contain_text("60 entries after the divergence")
    rows = page.locator(".compare-rows .compare-row")
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text("A step 0")
    expect(rows.first).to_contain_text("B asks")
    expect(rows.nth(1)).to_contain_text("B answers")


def test_pick_two_nodes_in_the_tree_and_compare_them(
    browser: Browser, server: Server, make_user: Any, db_access: None
) -> None:
    user = make_user()
    session, ids = two_tries(user)
    page = browser.new_page()
    sign_in(page, server, user)

    pick_two_and_compare(page, server, session, ids)
    screenshot(page, "40-compare-two-nodes")
    page.locator("#compare-more a[rel=next]").click()

    # The next rows join the ones shown, on the same page.
    rows = page.locator(".compare-rows .compare-row")
    expect(rows).to_have_count(60)
    expect(rows.last).to_contain_text("A step 59")
    expect(page).to_have_url(re.compile(rf"/compare\?a={ids['a']}&b={ids['b']}$"))
    expect(page.locator("#compare-more")).to_contain_text("End of both branches")
    page.close()


def test_pick_two_nodes_and_compare_them_without_javascript(
    browser: Browser, server: Server, make_user: Any, db_access: None
) -> None:
    user = make_user()
    session, ids = two_tries(user)
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    sign_in(page, server, user)

    pick_two_and_compare(page, server, session, ids)
    page.locator("#compare-more a[rel=next]").click()

    # Without a script, "show more" is the next page of rows.
    expect(page).to_have_url(re.compile(r"offset=50#row-50$"))
    rows = page.locator(".compare-rows .compare-row")
    expect(rows).to_have_count(10)
    expect(rows.first).to_contain_text("A step 50")
    expect(page.locator(".compare-summary")).to_contain_text(ids["ancestor"])
    screenshot(page, "41-compare-without-javascript")
    context.close()


def test_the_compare_page_follows_the_current_leaf_live(
    browser: Browser, server: Server, make_user: Any, db_access: None
) -> None:
    user = make_user()
    session, ids = two_tries(user)
    page = browser.new_page()
    sign_in(page, server, user)
    # Without `a`, A is the current leaf (the end of B here), followed as it moves on.
    page.goto(f"{server.url}/sessions/{session.id}/compare?b={ids['a']}")
    wait_live(page)
    entries = page.locator(".compare-totals tbody tr").first
    expect(entries).to_have_text(re.compile(r"Entries\s*2\s*60"))

    services.session_label(session=session, entry_id=ids["b"], label="watched")

    expect(entries).to_have_text(re.compile(r"Entries\s*3\s*60"))
    assert page.evaluate("window.strandLive.refreshes") >= 1
    screenshot(page, "42-compare-live")
    page.close()
