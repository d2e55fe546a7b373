"""Reading works with JavaScript off (plain links and forms), and pages fit a phone."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, expect

from sessions_app.models import Entry, Session
from sessions_app.services import demo, pi_io
from tests.browser.conftest import Server, screenshot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def imported(owner: User) -> Session:
    with demo.PI_DEMO_FILE.open("rb") as source:
        return pi_io.pi_import(source=source, owner=owner, name="Imported for reading").session


def test_read_only_pages_work_without_javascript(
    browser: Browser, server: Server, make_user: Any, db_access: None
) -> None:
    user = make_user()
    session = imported(user)
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    sign_in(page, server, user)
    page.fill("input[name=q]", "parser")
    page.press("input[name=q]", "Enter")
    expect(page.locator("#session-rows")).to_contain_text("Imported for reading")
    page.click("text=Imported for reading")
    expect(page.locator(".session-head h1")).to_have_text("Imported for reading")
    expect(page.locator("#chat .msg").first).to_be_visible()
    page.click("[data-view-tab=trace]")
    expect(page).to_have_url(re.compile(r"\?view=trace$"))
    expect(page.locator(".trace-layout")).to_contain_text("No turns")
    page.click("[data-view-tab=context]")
    expect(page).to_have_url(re.compile(r"\?view=context$"))
    expect(page.locator(".ctx-messages .ctx-msg").first).to_be_visible()
    screenshot(page, "20-no-javascript-context")
    # The tree: a plain form moves the leaf; the chat follows.
    first_answer = (
        Entry.objects.filter(session=session, data__message__role="assistant")
        .order_by("seq")
        .first()
    )
    assert first_answer is not None
    page.click("[data-view-tab=chat]")
    page.locator(f"#node-{first_answer.entry_id} .node-text").click()
    expect(page.locator(f"#node-{first_answer.entry_id}")).to_have_class(re.compile("current"))
    expect(page.locator("#chat .msg.assistant[data-entry]")).to_have_count(1)
    # The "⋯" link opens an entry's actions without a script.
    page.locator(f"#node-{first_answer.entry_id} .node-more").click()
    expect(page.locator("#node-panel")).to_contain_text("Fork into a new session")
    screenshot(page, "21-no-javascript-tree")
    context.close()


def test_pages_fit_a_phone(
    browser: Browser, server: Server, make_user: Any, db_access: None
) -> None:
    user = make_user()
    session = imported(user)
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    sign_in(page, server, user)
    screenshot(page, "22-phone-list")
    page.goto(f"{server.url}/sessions/{session.id}/")
    expect(page.locator("#chat .msg").first).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 392, f"the page scrolls sideways ({width}px)"
    screenshot(page, "23-phone-session")
    context.close()
