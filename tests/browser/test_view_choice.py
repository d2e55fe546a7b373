"""A view the user chose is never replaced by an older live swap.

Committed events refresh the page's views from the server. A refresh that started before the
user switched views (or while the switch was in flight) answers with the view as it was: if it
landed after the switch, the page would jump back. The refreshes are held here until the user
has switched, then let through, which is the race of pressing `2` just as a turn ends, made
certain instead of one time in five."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import Server, new_session, send, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_refresh_older_than_the_users_view_switch_does_not_replace_it(
    page: Page, server: Server, make_user: Any
) -> None:
    user: User = make_user()
    sign_in(page, server, user)
    new_session(page, "View choice")
    held: list[Route] = []
    holding = [True]

    def hold(route: Route) -> None:
        if holding[0]:
            held.append(route)
        else:
            route.continue_()

    page.route("**/*fragment=live*", hold)
    send(page, "read README.md")
    # The turn ends while the chat's refreshes are held back.
    page.wait_for_function("() => window.strandLive.turnsEnded > window.__turnsBefore")
    page.wait_for_timeout(300)  # the debounced refresh after the last event has asked
    assert held, "no refresh was asked for while the turn ran"
    page.keyboard.press("2")
    expect(page.locator("#view")).to_have_attribute("data-view", "trace")
    holding[0] = False
    for route in held:
        route.continue_()
    # The held answer has come back (dropped, or swapped in without the fix).
    page.wait_for_function(
        "() => window.strandLive.staleRefreshes + window.strandLive.refreshes > 0"
    )
    expect(page.locator("#view")).to_have_attribute("data-view", "trace")
    # It is asked again for the view now shown, and that answer lands.
    page.wait_for_function("() => window.strandLive.refreshes > 0")
    expect(page.locator("#view")).to_have_attribute("data-view", "trace")
    expect(page.locator(".turn-block")).to_have_count(1)
    expect(page.locator("#composer-state")).to_have_attribute("data-running", "false")
    assert page.evaluate("window.strandLive.staleRefreshes") >= 1
