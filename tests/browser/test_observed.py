"""Chromium: a session observed from another agent's OpenTelemetry spans (a real Pydantic AI
agent exporting to `/v1/traces`) updates live while that agent runs, with no composer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from sessions_app.models import Session
from sessions_app.services import tokens
from tests.browser.conftest import Server, screenshot, wait_live
from tests.ingest.conftest import FINAL_ANSWER, run_producer, scripted_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TOOL_DELAY_S = 3.0  # each tool takes this long: the page is open while the agent runs


def test_an_observed_session_updates_live_while_its_agent_runs(
    signed_in: Page, server: Server, user: User, db_access: Any, tmp_path: Path
) -> None:
    page = signed_in
    token = tokens.token_create(user, "otlp")[1]
    model = scripted_run()
    producer = run_producer(server.url, token, model, tmp_path, delay=TOOL_DELAY_S)
    try:
        deadline = time.monotonic() + 30
        while not Session.objects.filter(owner=user).exists():
            assert time.monotonic() < deadline, "no span arrived"
            assert producer.poll() is None, producer.communicate()[1]
            time.sleep(0.1)
        session = Session.objects.get(owner=user)
        page.goto(f"{server.url}/sessions/{session.id}/")
        wait_live(page)
        page.evaluate("window.__notReloaded = true")
        chat = page.locator("#chat")
        expect(chat.locator(".msg.user")).to_contain_text("weather and the time in Paris")
        assert producer.poll() is None  # the agent is still running
        expect(chat).not_to_contain_text(FINAL_ANSWER)
        # No composer: nothing runs here.
        expect(page.locator("textarea[data-composer]")).to_have_count(0)
        expect(page.locator(".observed-note")).to_contain_text("Observed")
        # The tools' results, then the answer, arrive while the page stays open.
        expect(chat.locator("details.tool")).to_have_count(2, timeout=30_000)
        expect(chat.locator(".msg.assistant[data-entry]").last).to_contain_text(
            FINAL_ANSWER, timeout=30_000
        )
        assert page.evaluate("window.__notReloaded") is True
        screenshot(page, "observed-session-live")
        out, err = producer.communicate(timeout=60)
        assert producer.returncode == 0, err
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
        model.close()
