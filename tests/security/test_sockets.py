"""Open websockets follow the account, against two real daphne processes on one database.

A signed-out browser, a deactivated account, a new password, a deleted user and staff who
lose staff each had a live feed that kept streaming. Now each such change closes the
sockets it shuts out, on every process, with a code the page understands (4401 signed out,
4403 no longer visible), and those sockets receive no event committed after the change;
sockets that are still allowed stay open and keep receiving.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.conf import settings
from django.contrib.sessions.models import Session as WebSession
from django.utils import timezone
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from deploy import daphne
from sessions_app import services, store
from sessions_app.models import Session
from sessions_app.services import tokens
from tests.api.conftest import user_msg
from tests.runtime.conftest import child_database_url

pytestmark = pytest.mark.django_db(transaction=True)

SIGNED_OUT, NOT_VISIBLE = 4401, 4403
WAIT_S = 20  # how long a socket may take to close before the test fails (not a timing check)


@dataclass
class Server:
    url: str
    process: Any

    @property
    def ws(self) -> str:
        return self.url.replace("http://", "ws://", 1)


def _start(**env: str) -> Server:
    port = daphne.free_port()
    process = daphne.start(
        port, {"DATABASE_URL": child_database_url(), "STRAND_RECOVER_AT_START": "0", **env}
    )
    return Server(f"http://127.0.0.1:{port}", process)


@pytest.fixture(scope="module")
def servers(django_db_setup: Any, django_db_blocker: Any) -> Iterator[tuple[Server, Server]]:
    """Two daphne processes that share only the database. Their periodic re-check is an
    hour away, so what closes a socket here is the account notification."""
    with django_db_blocker.unblock():
        started = [_start(STRAND_WS_RECHECK_S="3600") for _ in range(2)]
    try:
        yield started[0], started[1]
    finally:
        for server in started:
            daphne.stop(server.process)


class Browser:
    """One browser: a cookie jar that signs in and out through the real pages."""

    def __init__(self, server: Server, username: str, password: str) -> None:
        self.http = requests.Session()
        login = f"{server.url}/accounts/login/"
        self.http.get(login, timeout=30)
        answer = self.http.post(
            login,
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": self.http.cookies["csrftoken"],
            },
            headers={"Referer": login},
            allow_redirects=False,
            timeout=30,
        )
        assert answer.status_code == 302, answer.text[:500]

    @property
    def cookie(self) -> str:
        name = settings.SESSION_COOKIE_NAME
        return f"{name}={self.http.cookies[name]}"

    def sign_out(self, server: Server) -> None:
        answer = self.http.post(
            f"{server.url}/accounts/logout/",
            data={"csrfmiddlewaretoken": self.http.cookies["csrftoken"]},
            headers={"Referer": f"{server.url}/"},
            allow_redirects=False,
            timeout=30,
        )
        assert answer.status_code in (200, 302), answer.text[:500]
        assert settings.SESSION_COOKIE_NAME not in self.http.cookies


def open_socket(server: Server, session: Session, headers: dict[str, str]) -> ClientConnection:
    return connect(
        f"{server.ws}/ws/sessions/{session.id}/?after_seq=-1",
        additional_headers={"Origin": server.url, **headers},
        open_timeout=30,
    )


@contextmanager
def watching(server: Server, session: Session, browser: Browser) -> Iterator[ClientConnection]:
    """A socket on `session`, read up to its `ready`."""
    with open_socket(server, session, {"Cookie": browser.cookie}) as ws:
        while json.loads(ws.recv(timeout=WAIT_S))["type"] != "ready":
            pass
        yield ws


def append(session: Session, text: str) -> int:
    session.refresh_from_db()
    return store.append_events(session.id, session.last_seq, [user_msg(text)]).last_seq


def closed_with(ws: ClientConnection) -> tuple[int | None, list[int]]:
    """Read until the server closes the socket: its close code and the seqs of the events
    that arrived meanwhile (a socket that stays open fails the test with a timeout)."""
    seqs: list[int] = []
    try:
        while True:
            message = json.loads(ws.recv(timeout=WAIT_S))
            if message["type"] == "event":
                seqs.append(message["seq"])
    except ConnectionClosed as closed:
        return (closed.rcvd.code if closed.rcvd else None), seqs


def receives(ws: ClientConnection, seq: int) -> bool:
    """The open socket delivers the event `seq`."""
    while True:
        message = json.loads(ws.recv(timeout=WAIT_S))
        if message["type"] == "event" and message["seq"] == seq:
            return True


def refused(server: Server, session: Session, headers: dict[str, str]) -> bool:
    try:
        with open_socket(server, session, headers):
            return False
    except InvalidStatus as error:
        return error.response.status_code == 403


def assert_shut_out(ws: ClientConnection, code: int, session: Session) -> None:
    """`ws` closes with `code`, and the event committed right after the change (which the
    socket would have been sent had it stayed open) never reaches it."""
    after_change = append(session, "written after the change")
    closing_code, seqs = closed_with(ws)
    assert closing_code == code
    assert after_change not in seqs


# --- sign-out ---------------------------------------------------------------------------


@pytest.mark.parametrize("socket_on", ["same process", "other process"])
def test_signing_out_closes_that_browsers_sockets(
    servers: tuple[Server, Server], alice: Any, alice_session: Session, socket_on: str
) -> None:
    a, b = servers
    socket_server = a if socket_on == "same process" else b
    laptop = Browser(a, "alice", "alice-pass-1234")
    phone = Browser(b, "alice", "alice-pass-1234")
    with (
        watching(socket_server, alice_session, laptop) as laptop_ws,
        watching(a, alice_session, phone) as phone_ws,
    ):
        signed_in_cookie = laptop.cookie
        laptop.sign_out(a)
        assert_shut_out(laptop_ws, SIGNED_OUT, alice_session)
        # The phone's sign-in is untouched: its socket stays and keeps streaming.
        assert receives(phone_ws, append(alice_session, "still live on the phone"))
    assert refused(socket_server, alice_session, {"Cookie": signed_in_cookie})


# --- changes to the account --------------------------------------------------------------


def test_deactivation_closes_every_socket_of_the_account_on_every_process(
    servers: tuple[Server, Server], alice: Any, bob: Any, alice_session: Session
) -> None:
    a, b = servers
    bobs = services.session_create(owner=bob, title="Bob's")
    with (
        watching(a, alice_session, Browser(a, "alice", "alice-pass-1234")) as on_a,
        watching(b, alice_session, Browser(b, "alice", "alice-pass-1234")) as on_b,
        watching(b, bobs, Browser(b, "bob", "bob-pass-1234")) as bobs_ws,
    ):
        # A change that takes nothing away re-checks and keeps the sockets.
        alice.first_name = "Alice"
        alice.save()
        assert receives(on_a, append(alice_session, "after a new first name"))

        type(alice).objects.filter(pk=alice.pk).update(is_active=False)
        after_change = append(alice_session, "written after the deactivation")
        for ws in (on_a, on_b):
            code, seqs = closed_with(ws)
            assert code == SIGNED_OUT and after_change not in seqs
        assert receives(bobs_ws, append(bobs, "Bob is still watched"))


def test_a_new_password_closes_the_sockets_signed_in_with_the_old_one(
    servers: tuple[Server, Server], alice: Any, alice_session: Session
) -> None:
    a, b = servers
    browser = Browser(a, "alice", "alice-pass-1234")
    with watching(b, alice_session, browser) as ws:
        alice.set_password("a-brand-new-pass-5678")
        alice.save()
        assert_shut_out(ws, SIGNED_OUT, alice_session)
    assert refused(a, alice_session, {"Cookie": browser.cookie})


def test_staff_who_lose_staff_lose_other_peoples_sessions_but_keep_their_own(
    servers: tuple[Server, Server], alice_session: Session, carol: Any
) -> None:
    a, b = servers
    carols = services.session_create(owner=carol, title="Carol's own")
    browser = Browser(a, "carol", "carol-pass-1234")
    with (
        watching(b, alice_session, browser) as on_alices,
        watching(a, carols, browser) as on_own,
    ):
        carol.is_staff = False
        carol.save()
        assert_shut_out(on_alices, NOT_VISIBLE, alice_session)
        assert receives(on_own, append(carols, "Carol still sees her own session"))
    assert refused(b, alice_session, {"Cookie": browser.cookie})


def test_a_deleted_user_loses_their_sockets(
    servers: tuple[Server, Server], alice_session: Session, carol: Any
) -> None:
    a, b = servers
    with watching(b, alice_session, Browser(a, "carol", "carol-pass-1234")) as ws:
        carol.delete()
        assert_shut_out(ws, SIGNED_OUT, alice_session)


# --- tokens and the periodic check ---------------------------------------------------------


def test_a_personal_token_does_not_open_a_socket(
    servers: tuple[Server, Server], alice: Any, alice_session: Session
) -> None:
    """Sockets sign in with the browser session only, so a revoked token has no open socket
    to close."""
    a, _ = servers
    _, plaintext = tokens.token_create(alice, "socket")
    assert refused(a, alice_session, {"Authorization": f"Bearer {plaintext}"})


def test_an_expired_sign_in_is_closed_by_the_periodic_check(
    alice: Any, alice_session: Session
) -> None:
    """Expiry changes no row, so no notification: the periodic re-check closes it."""
    server = _start(STRAND_WS_RECHECK_S="1")
    try:
        browser = Browser(server, "alice", "alice-pass-1234")
        with watching(server, alice_session, browser) as ws:
            key = browser.http.cookies[settings.SESSION_COOKIE_NAME]
            expired = timezone.now() - timedelta(minutes=1)
            assert WebSession.objects.filter(pk=key).update(expire_date=expired) == 1
            code, _ = closed_with(ws)
            assert code == SIGNED_OUT
    finally:
        daphne.stop(server.process)
