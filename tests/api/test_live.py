"""The API over real HTTP, against a live server: a program with a token runs a turn, and a
browser signs in, then writes with its session cookie and the CSRF token."""

from __future__ import annotations

import time
from io import StringIO
from typing import Any

import pytest
import requests
from django.core.management import call_command

from sessions_app import services
from tests.api.conftest import OFFLINE_PRESET

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_program_runs_a_turn_with_a_token(live_server: Any, alice: Any, bob: Any) -> None:
    out = StringIO()
    call_command("create_token", "alice", "--name", "live", stdout=out)
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {out.getvalue().strip()}"
    api = f"{live_server.url}/api"

    created = http.post(f"{api}/sessions", json={"title": "<b>live</b>"})
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    sent = http.post(f"{api}/sessions/{sid}/messages", json={"text": "hello over HTTP"})
    assert sent.status_code == 202
    turn = sent.json()["turn"]

    after, ended = -1, False
    deadline = time.monotonic() + 20
    while not ended:
        assert time.monotonic() < deadline, "the turn did not end"
        page = http.get(f"{api}/sessions/{sid}/events", params={"after_seq": after}).json()
        for event in page["events"]:
            after = event["seq"]
            ended = ended or (event["type"] == "turn/end" and event["data"]["turn"] == turn)
        time.sleep(0.05)

    chat = http.get(f"{api}/sessions/{sid}/views/chat").json()
    assert [item["kind"] for item in chat["items"]] == ["user", "assistant"]
    assert chat["items"][1]["text"]
    listed = http.get(f"{api}/sessions").json()["items"]
    assert [s["title"] for s in listed] == ["<b>live</b>"]

    bobs = services.session_create(owner=bob, title="Bob's", preset=OFFLINE_PRESET)
    foreign = http.get(f"{api}/sessions/{bobs.id}")
    assert foreign.status_code == 404 and foreign.json()["error"] == "not_found"
    anonymous = requests.get(f"{api}/sessions/{sid}")
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "unauthorized"


def test_a_browser_signs_in_and_writes_with_the_csrf_token(live_server: Any, alice: Any) -> None:
    browser = requests.Session()
    login = f"{live_server.url}/accounts/login/"
    browser.get(login)
    signed_in = browser.post(
        login,
        data={
            "username": "alice",
            "password": "alice-pass-1234",
            "csrfmiddlewaretoken": str(browser.cookies["csrftoken"]),
        },
        headers={"Referer": login},
        allow_redirects=False,
    )
    assert signed_in.status_code == 302
    api = f"{live_server.url}/api"
    assert browser.get(f"{api}/me").json()["auth"] == "session"
    refused = browser.post(f"{api}/sessions", json={"title": "no token"})
    assert refused.status_code == 403 and refused.json()["error"] == "csrf_failed"
    made = browser.post(
        f"{api}/sessions",
        json={"title": "with token"},
        headers={"X-CSRFToken": str(browser.cookies["csrftoken"])},
    )
    assert made.status_code == 201
    token = browser.post(
        f"{api}/tokens",
        json={"name": "from the browser"},
        headers={"X-CSRFToken": str(browser.cookies["csrftoken"])},
    )
    assert token.status_code == 201 and token.json()["token"].startswith("strand_")
