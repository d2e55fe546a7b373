"""A process holds one LISTEN connection, against a real daphne process.

The agent engine (runs waiting for events wake up, cancels reach their turn) and the live
feed (committed events fanned out to websockets) once each opened a connection LISTENing on
the same channel. Both now subscribe to the process's one listener: while the process
serves a websocket and runs a turn, exactly one of its connections is a listener's.

The server's connections are told apart from every other process's by the application
name libpq reads from PGAPPNAME in its environment.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from django.conf import settings
from django.db import connection
from websockets.sync.client import ClientConnection, connect

from deploy import daphne
from sessions_app import services
from sessions_app.models import Session
from sessions_app.services import tokens
from tests.runtime.conftest import child_database_url

pytestmark = pytest.mark.django_db(transaction=True)

WAIT_S = 30  # a guard against hanging, never a timing
WRITE = "write f.txt: x"  # the offline model answers with a write call: an approval


@pytest.fixture
def server() -> Iterator[tuple[str, str]]:
    """A daphne process on the test database: its URL and the name its connections carry."""
    port = daphne.free_port()
    name = f"strand-listen-{port}"
    process = daphne.start(
        port,
        {
            "DATABASE_URL": child_database_url(),
            "STRAND_RECOVER_AT_START": "0",
            "STRAND_OFFLINE_CHUNK_DELAY_MS": "0",
            "STRAND_WORKSPACE_ROOTS": os.pathsep.join(settings.STRAND_WORKSPACE_ROOTS),
            "PGAPPNAME": name,
        },
    )
    try:
        yield f"http://127.0.0.1:{port}", name
    finally:
        daphne.stop(process)


def until(predicate: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def listening_connections(name: str) -> list[str]:
    """The last statement of each connection of the process named `name` that LISTENs."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND application_name = %s "
            "AND query ILIKE 'LISTEN %%'",
            [name],
        )
        return [str(row[0]) for row in cur.fetchall()]


def signed_in(url: str) -> requests.Session:
    browser = requests.Session()
    login = f"{url}/accounts/login/"
    browser.get(login, timeout=WAIT_S)
    answer = browser.post(
        login,
        data={
            "username": "alice",
            "password": "alice-pass-1234",
            "csrfmiddlewaretoken": browser.cookies["csrftoken"],
        },
        headers={"Referer": login},
        allow_redirects=False,
        timeout=WAIT_S,
    )
    assert answer.status_code == 302, answer.text[:300]
    return browser


def events_until(ws: ClientConnection, wanted: Callable[[dict[str, Any]], bool]) -> None:
    while True:
        message = json.loads(ws.recv(timeout=WAIT_S))
        if message["type"] == "event" and wanted(message):
            return


def test_a_process_serving_a_socket_and_a_turn_listens_on_one_connection(
    server: tuple[str, str], alice: Any
) -> None:
    url, name = server
    session = services.session_create(owner=alice, title="one listener")
    _, token = tokens.token_create(alice, "tests")
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {token}"
    browser = signed_in(url)
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME]}"

    with connect(
        f"{url.replace('http://', 'ws://', 1)}/ws/sessions/{session.id}/?after_seq=-1",
        additional_headers={"Origin": url, "Cookie": cookie},
        open_timeout=WAIT_S,
    ) as ws:
        while json.loads(ws.recv(timeout=WAIT_S))["type"] != "ready":
            pass
        sent = api.post(
            f"{url}/api/sessions/{session.id}/messages", json={"text": WRITE}, timeout=WAIT_S
        )
        assert sent.status_code == 202, sent.text[:300]
        # The socket hears the turn's commits, and the turn waits for its approval.
        events_until(ws, lambda m: m["event"] == "approval/asked")
        pending = until(
            lambda: api.get(f"{url}/api/sessions/{session.id}/approvals", timeout=WAIT_S).json()
        )

        assert len(listening_connections(name)) == 1

        decided = api.post(
            f"{url}/api/sessions/{session.id}/approvals/{pending[0]['approval_id']}",
            json={"outcome": "allowed"},
            timeout=WAIT_S,
        )
        assert decided.status_code == 204, decided.text[:300]
        events_until(ws, lambda m: m["event"] == "turn/end")

    assert len(listening_connections(name)) == 1
    assert Session.objects.get(id=session.id).last_seq > 0
