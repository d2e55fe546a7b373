"""Limits as a person meets them in Chromium: a refused message leaves the page and the
typed text as they were and says why; repeated failed sign-ins pause sign-in with a page
that says for how long."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from sessions_app import limits
from sessions_app.services import ratelimit
from tests.browser.conftest import PASSWORD, Server, new_session, screenshot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def user(make_user: Any) -> User:
    return make_user()


def use_up(user: User, scope: str) -> None:
    """Spend the user's whole allowance in `scope` for the current window (the servers
    read the same counters)."""
    allowed, _ = ratelimit.limit_for(scope)
    for _ in range(allowed):
        ratelimit.rate_hit(user, scope)


def test_a_refused_message_keeps_the_typed_text_and_says_why(
    page: Page, server: Server, user: User, db_access: None
) -> None:
    sign_in(page, server, user)
    new_session(page, "Limited")
    use_up(user, "message")
    page.fill("textarea[data-composer]", "a message over the limit")
    page.click("#composer-state button.primary")
    flash = page.locator("#flash .flash-msg.error")
    expect(flash).to_contain_text("Too many messages: at most")
    expect(flash).to_contain_text("Try again in")
    expect(page.locator("textarea[data-composer]")).to_have_value("a message over the limit")
    expect(page.locator("#chat .msg.user")).to_have_count(0)
    screenshot(page, "limits-message-refused")


def test_sign_in_pauses_after_repeated_failures(
    page: Page, server: Server, user: User, settings: Any
) -> None:
    for attempt in range(settings.AXES_FAILURE_LIMIT):
        page.goto(server.url + "/accounts/login/")
        page.fill("input[name=username]", user.get_username())
        page.fill("input[name=password]", f"wrong-{attempt}")
        page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Sign-in paused")
    wait = limits.duration_words(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    expect(page.locator(".login-card")).to_contain_text(f"Try again in {wait}.")
    screenshot(page, "limits-sign-in-paused")
    # The right password does not get through while paused.
    page.goto(server.url + "/accounts/login/")
    page.fill("input[name=username]", user.get_username())
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Sign-in paused")


def test_a_message_refused_as_bad_input_keeps_the_typed_text_and_says_why(
    page: Page, server: Server, user: User
) -> None:
    sign_in(page, server, user)
    new_session(page, "Bad input")
    typed = "a NUL \x00 in the middle"
    page.fill("textarea[data-composer]", typed)
    page.click("#composer-state button.primary")
    flash = page.locator("#flash .flash-msg.error")
    expect(flash).to_contain_text("NUL")
    expect(flash).to_have_attribute("data-status", "400")
    expect(page.locator("textarea[data-composer]")).to_have_value(typed)
    expect(page.locator("#chat .msg.user")).to_have_count(0)
