"""Replaying a recorded request from the context view, with another preset, and landing on
the comparison of the two answers: with JavaScript, and without."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import (
    OTHER_PRESET,
    Server,
    new_session,
    screenshot,
    send,
    sign_in,
    wait_turn,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def replay_from_context_view(page: Page, session_url: str) -> str:
    """Open the context view of the latest request, choose the other preset, replay, and
    wait to land on the comparison; the replay's answer (the comparison's `b`)."""
    page.goto(session_url.split("?")[0] + "?view=context")
    expect(page.locator("#hash-badge")).to_have_attribute("data-matches", "true")
    page.click("#replay-link")
    expect(page.locator("#replay-hash")).to_have_attribute("data-matches", "true")
    page.uncheck("input[name=presets][value=offline]")
    page.check(f"input[name=presets][value={OTHER_PRESET}]")
    page.click("#replay-submit")
    # The group page reloads itself until the replay has answered, then goes on.
    expect(page).to_have_url(re.compile(r"/compare\?a=\w+&b=\w+$"), timeout=30_000)
    found = re.search(r"b=(\w+)$", page.url)
    assert found
    # The page compares the original answer with the replay's.
    expect(page.locator("main")).to_contain_text(found.group(1))
    return found.group(1)


def test_replay_with_another_preset_lands_on_the_comparison(
    browser: Browser, server: Server, make_user: Any, db_access: None
) -> None:
    user = make_user()
    context = browser.new_context()
    page = context.new_page()
    sign_in(page, server, user)
    url = new_session(page, "Replays")
    send(page, "hello there")
    wait_turn(page)

    first = replay_from_context_view(page, url)
    screenshot(page, "40-replay-compare")

    # The same without JavaScript: a plain form, a page that reloads itself, a redirect.
    plain = browser.new_context(java_script_enabled=False)
    no_js = plain.new_page()
    sign_in(no_js, server, user)
    second = replay_from_context_view(no_js, url)
    assert second != first  # a branch of its own
    plain.close()
    context.close()


def test_staff_see_the_replay_page_without_its_form(
    browser: Browser, server: Server, make_user: Any, db_access: None
) -> None:
    owner, staff = make_user(), make_user("staff", staff=True)
    context = browser.new_context()
    page = context.new_page()
    sign_in(page, server, owner)
    url = new_session(page, "Owner's replays")
    send(page, "hello")
    wait_turn(page)
    page.goto(url.split("?")[0] + "?view=context")
    replay_href = page.locator("#replay-link").get_attribute("href")
    assert replay_href
    context.close()

    other = browser.new_context()
    staff_page = other.new_page()
    sign_in(staff_page, server, staff)
    staff_page.goto(url.split("?")[0] + "?view=context")
    expect(staff_page.locator("#hash-badge")).to_be_visible()
    expect(staff_page.locator("#replay-link")).to_have_count(0)
    staff_page.goto(server.url + replay_href)
    expect(staff_page.locator("#replay-read-only")).to_be_visible()
    expect(staff_page.locator("#replay-form")).to_have_count(0)
    other.close()
