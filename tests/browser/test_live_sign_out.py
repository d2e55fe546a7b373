"""A session page whose sign-in ends elsewhere: signing out in another tab closes the page's
live feed, and the page says so and stops reconnecting instead of retrying forever."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import Server, new_session, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_signing_out_in_another_tab_ends_the_live_feed_with_a_notice(
    browser: Browser, server: Server, make_user: Any
) -> None:
    # Playwright's waits evaluate strings, which the pages' Content-Security-Policy refuses.
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    sign_in(page, server, make_user())
    url = new_session(page, "Watched while signing out")
    assert page.evaluate("window.strandLive.connects") == 1

    other_tab = context.new_page()
    other_tab.goto(server.url + "/")
    other_tab.click("form[action='/accounts/logout/'] button[type=submit]")

    notice = page.locator("#live-ended")
    expect(notice).to_contain_text("signed out")
    expect(page.locator("body")).to_have_attribute("data-live", "signed-out")
    assert page.evaluate("window.strandLive.closedCode") == 4401
    # The element that opens the socket is gone: nothing can reconnect it.
    expect(page.locator("#live-socket")).to_have_count(0)
    sign_in_link = notice.locator("a")
    expect(sign_in_link).to_have_attribute("href", "/accounts/login/?next=" + url_path(url, server))
    sign_in_link.click()
    expect(page.locator("input[name=username]")).to_be_visible()
    context.close()


def url_path(url: str, server: Server) -> str:
    from urllib.parse import quote

    return quote(url.removeprefix(server.url), safe="")
