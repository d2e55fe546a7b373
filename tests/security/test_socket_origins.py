"""Websocket origins are checked as Django's CSRF check checks a form: scheme, host and
port, against the handshake's own origin and `CSRF_TRUSTED_ORIGINS`.

The attack: Alice is signed in; a page on another port of the same host (or served over the
other scheme) opens `ws://…/ws/sessions/<her session>/` with her cookie. channels'
`AllowedHostsOriginValidator` compared hosts only and accepted it, and the socket streamed
her session. Run for real against daphne: such a handshake is answered 403 and nothing is
streamed; her own pages and the trusted origins still connect and read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from deploy import daphne
from sessions_app.models import Session
from tests.runtime.conftest import child_database_url
from tests.security.test_sockets import WAIT_S, Browser, Server

pytestmark = pytest.mark.django_db(transaction=True)

TRUSTED = "https://strand.example.test"
TRUSTED_PATTERN = "https://*.example.org"


@pytest.fixture(scope="module")
def server(django_db_setup: Any, django_db_blocker: Any) -> Iterator[Server]:
    """One daphne with a trusted origin, a trusted pattern and a TLS proxy's header."""
    port = daphne.free_port()
    env = {
        "DATABASE_URL": child_database_url(),
        "STRAND_RECOVER_AT_START": "0",
        "CSRF_TRUSTED_ORIGINS": f"{TRUSTED},{TRUSTED_PATTERN}",
        "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto,https",
    }
    with django_db_blocker.unblock():
        process = daphne.start(port, env)
    try:
        yield Server(f"http://127.0.0.1:{port}", process)
    finally:
        daphne.stop(process)


def handshake(server: Server, session: Session, browser: Browser, headers: dict[str, str]) -> Any:
    """The status of the handshake (101 when accepted) and, when accepted, the first
    message the socket sends (the feed's first event or its `ready`)."""
    try:
        with connect(
            f"{server.ws}/ws/sessions/{session.id}/?after_seq=-1",
            additional_headers={"Cookie": browser.cookie, **headers},
            open_timeout=30,
        ) as ws:
            return 101, json.loads(ws.recv(timeout=WAIT_S))
    except InvalidStatus as refused:
        return refused.response.status_code, None


@pytest.fixture
def alice_browser(server: Server, alice: Any) -> Browser:
    return Browser(server, "alice", "alice-pass-1234")


def test_the_pages_own_origin_streams(
    server: Server, alice_browser: Browser, alice_session: Session
) -> None:
    status, first = handshake(server, alice_session, alice_browser, {"Origin": server.url})
    assert status == 101
    assert first["type"] in ("event", "ready")


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost:9999",  # the attack as found: another port of the same host
        "http://127.0.0.1:9999",  # another port, the same host name
        "https://127.0.0.1:{port}",  # the same host and port, the other scheme
        "http://127.0.0.1",  # the same host, the default port
        "http://strand.example.test",  # a trusted origin's host, the other scheme
        "http://a.example.org",  # under the trusted pattern, the other scheme
        "https://example.org.evil.test",  # a look-alike of the trusted pattern
        "null",  # a sandboxed page (the HTML export) or a file
    ],
)
def test_another_origin_is_refused_at_the_handshake(
    server: Server, alice_browser: Browser, alice_session: Session, origin: str
) -> None:
    port = server.url.rsplit(":", 1)[1]
    status, first = handshake(
        server, alice_session, alice_browser, {"Origin": origin.format(port=port)}
    )
    assert (status, first) == (403, None)


def test_a_handshake_without_origin_is_refused(
    server: Server, alice_browser: Browser, alice_session: Session
) -> None:
    # Every browser sends Origin; a socket can only be signed in by a browser's cookie
    # (personal tokens do not open websockets), so none goes without.
    assert handshake(server, alice_session, alice_browser, {}) == (403, None)


@pytest.mark.parametrize("origin", [TRUSTED, "https://a.example.org"])
def test_trusted_origins_stream(
    server: Server, alice_browser: Browser, alice_session: Session, origin: str
) -> None:
    status, first = handshake(server, alice_session, alice_browser, {"Origin": origin})
    assert status == 101 and first["type"] in ("event", "ready")


def test_behind_a_tls_proxy_the_https_origin_is_the_pages_own(
    server: Server, alice_browser: Browser, alice_session: Session
) -> None:
    host = server.url.removeprefix("http://")
    https = {"Origin": f"https://{host}", "X-Forwarded-Proto": "https"}
    assert handshake(server, alice_session, alice_browser, https)[0] == 101
    # The proxy says plain HTTP: the https origin is another scheme again.
    http = {"Origin": f"https://{host}", "X-Forwarded-Proto": "http"}
    assert handshake(server, alice_session, alice_browser, http) == (403, None)


def test_a_host_header_outside_allowed_hosts_is_no_origin_of_ours(
    server: Server, alice_browser: Browser, alice_session: Session
) -> None:
    # The page's "own" origin is only its own when Django would serve its Host.
    headers = {"Origin": "http://evil.example:80", "Host": "evil.example:80"}
    assert handshake(server, alice_session, alice_browser, headers) == (403, None)
