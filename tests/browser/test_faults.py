"""A failed model request in Chromium: the error card on the failed reply (what failed,
after how many attempts), Retry from it, and the failed step's card in the trace."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.browser.conftest import (
    Server,
    expect_turn,
    new_session,
    screenshot,
    send,
    sign_in,
    wait_turn,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def user(make_user: Any) -> User:
    return make_user()


def test_a_failed_reply_shows_an_error_card_and_retry_asks_again(
    page: Page, server: Server, user: User
) -> None:
    sign_in(page, server, user)
    new_session(page, "Faults")
    # The offline model refuses its (absent) key once: the next identical request passes.
    send(page, "fault 401 once")
    wait_turn(page)
    chat = page.locator("#chat")
    card = chat.locator(".msg.assistant .fault-card")
    expect(card).to_have_count(1)
    expect(card.locator(".fault-title")).to_have_text("API key refused (HTTP 401)")
    expect(card.locator(".fault-attempts")).to_have_text("after 1 attempt")
    expect(card.locator(".fault-message")).to_contain_text("Preset 'offline' sends no key")
    screenshot(page, "faults-01-error-card")

    expect_turn(page)
    card.locator("button[data-retry]").click()
    wait_turn(page)
    expect(chat.locator(".fault-card")).to_have_count(0)
    expect(chat.locator(".msg.assistant[data-entry]").last).to_contain_text("You said:")
    expect(chat.locator(".msg.user")).to_have_count(1)  # Retry sends no new message
    screenshot(page, "faults-02-after-retry")

    page.keyboard.press("2")
    expect(page).to_have_url(re.compile(r"\?view=trace$"))
    blocks = page.locator(".turn-block")
    expect(blocks).to_have_count(2)
    failed = page.locator("#turn-1")
    expect(failed.locator(".span-fault .fault-title")).to_have_text("API key refused (HTTP 401)")
    expect(failed.locator(".span.kind-step .pill.error")).to_have_count(1)
    expect(page.locator("#turn-1 .turn-head .pill")).to_have_text("error")
    expect(page.locator("#turn-2 .turn-head .pill")).to_have_text("ok")
    screenshot(page, "faults-03-trace-failed-step")


def test_a_retried_attempt_shows_in_the_trace(page: Page, server: Server, user: User) -> None:
    sign_in(page, server, user)
    new_session(page, "Retries")
    # A 503 once: the preset's automatic retry (after its backoff) succeeds.
    send(page, "fault 503 once, then fine")
    wait_turn(page)
    expect(page.locator("#chat .fault-card")).to_have_count(0)
    page.keyboard.press("2")
    requests = page.locator("#turn-1 .span.kind-request")
    expect(requests).to_have_count(2)
    expect(requests.nth(0).locator(".pill")).to_have_text("error")
    requests.nth(0).locator(".span-name").click()
    detail = page.locator("#span-detail")
    expect(detail).to_contain_text("server_error")
    expect(detail).to_contain_text("attempt")
    screenshot(page, "faults-04-retried-request")
