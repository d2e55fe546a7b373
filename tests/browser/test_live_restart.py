"""A page whose server goes away and comes back: it says it is reconnecting, keeps retrying
after growing random waits (through the server's "try again later"), and resumes after the
last event it has, missing nothing and showing nothing twice."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from deploy.daphne import free_port
from sessions_app import store
from sessions_app.models import Session
from sessions_app.store import NewEvent
from tests.browser.conftest import (
    Server,
    _database_url,
    _start_daphne,
    _stop,
    _wait_ready,
    new_session,
    screenshot,
    sign_in,
    wait_live,
)

pytestmark = pytest.mark.browser


def _message(text: str) -> NewEvent:
    entry = {"type": "message", "message": {"role": "user", "content": text}}
    return NewEvent("user/message", {"entry": entry})


def test_a_page_reconnects_politely_when_its_server_restarts(
    page: Page,
    make_user: Any,
    db_access: None,
    workspace: Path,
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "STRAND_WORKSPACE_ROOTS": str(workspace),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    port = free_port()
    running: list[Server] = []

    def serve(name: str, **extra: str) -> Server:
        server = _start_daphne(port, {**env, **extra}, tmp_path / f"{name}.log")
        running.append(server)
        _wait_ready(server)
        return server

    def crash(server: Server) -> None:
        server.process.kill()
        server.process.wait(10)
        running.remove(server)

    try:
        first = serve("first")
        user: User = make_user("restart")
        sign_in(page, first, user)
        url = new_session(page, "Restart")
        session = Session.objects.get(id=url.rstrip("/").rsplit("/", 1)[-1])
        expect(page.locator("#live-state")).to_be_hidden()

        crash(first)
        expect(page.locator("#live-state")).to_be_visible()
        expect(page.locator("#live-state")).to_have_text("Reconnecting…")
        expect(page.locator("body")).to_have_attribute("data-live", "reconnecting")
        for text in ("written while the server was down", "and another"):
            session.refresh_from_db()
            store.append_events(session.id, session.last_seq, [_message(text)])

        # Back, but too busy: every socket is turned away with 4503, and the page retries.
        busy = serve("busy", STRAND_WS_MAX_CONNECTING="0")
        page.wait_for_function("() => window.strandLive.lastCloseCode === 4503", timeout=60_000)
        failures = page.evaluate("window.strandLive.failures")
        page.wait_for_function(
            f"() => window.strandLive.failures > {failures}", timeout=60_000
        )  # it tried again after the refusal, and counts on
        expect(page.locator("#live-state")).to_be_visible()
        screenshot(page, "live-reconnecting")
        _stop(busy)
        running.remove(busy)

        serve("again")
        page.wait_for_function("() => window.strandLive.ready === true", timeout=90_000)
        wait_live(page)
        expect(page.locator("#live-state")).to_be_hidden()
        expect(page.locator("body")).to_have_attribute("data-live", "live")
        expect(page.locator("#chat .msg.user")).to_have_count(2)
        session.refresh_from_db()
        live = page.evaluate("window.strandLive")
        assert live["failures"] == 0
        assert live["duplicates"] == 0
        assert live["lastSeq"] == session.last_seq
        assert live["received"] == sorted(set(live["received"]))
    finally:
        for server in running:
            _stop(server)
