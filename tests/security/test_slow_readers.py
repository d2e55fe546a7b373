"""Downloads through daphne go out as fast as their clients read them.

Before, daphne wrote every piece of a response into Twisted's buffer at once: four
downloads of a 24 MB export that read nothing took the server from 128 to 279 MB, for as
long as the connections stayed open, and a page of the export held up to 5,000 entries
whatever their size. Now a body's next piece waits for the last to go out, a page of
entries stops at about 8 MB, and a client that reads nothing for `STRAND_HTTP_SEND_STALL_S`
is let go, while one that reads slowly but steadily gets every byte."""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from sessions_app.services import pi_io, tokens
from tests.security.daphne_child import peak_kb, port_for, serving
from tests.security.test_upload_memory import pi_lines

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1024 * 1024
STALL_S = 3
BIG_ENTRIES = 400  # of 100 KB each: an export of about 40 MB
UNREAD = 4
# What four downloads nobody reads may add to the server's peak: a page of entries and a
# few pieces each, never the export (four times 40 MB before).
PEAK_GROWTH_KB = 60 * 1024


def _import(owner: Any, entries: int, name: str) -> Any:
    source = io.BytesIO(b"".join(pi_lines(entries)))
    return pi_io.pi_import(source=source, owner=owner, name=name).session


@pytest.fixture
def server(alice: Any) -> Iterator[Any]:
    port = port_for(5)
    with serving(port, STRAND_HTTP_SEND_STALL_S=str(STALL_S)) as process:
        process.port = port  # type: ignore[attr-defined]
        yield process


def _unread(port: int, path: str, token: str) -> socket.socket:
    """A GET whose answer nobody reads yet; a small receive buffer keeps what the kernel
    takes of it small."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode()
    )
    return sock


def _read_all(sock: socket.socket, pause_s: float = 0.0, burst: int = 0) -> int:
    """The bytes `sock` gives until its end (or its reset), read in bursts of `burst` with
    `pause_s` between them when asked."""
    got = since_pause = 0
    sock.settimeout(30)
    while True:
        try:
            data = sock.recv(256 * 1024)
        except ConnectionResetError:
            return got
        if not data:
            return got
        got += len(data)
        since_pause += len(data)
        if burst and since_pause >= burst:
            time.sleep(pause_s)
            since_pause = 0


def _export_size(port: int, path: str, token: str) -> int:
    with requests.get(
        f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {token}"}, stream=True
    ) as response:
        assert response.status_code == 200
        return sum(len(piece) for piece in response.iter_content(256 * 1024))


def test_downloads_nobody_reads_cost_the_server_a_piece_not_the_export(
    server: Any, alice: Any
) -> None:
    session = _import(alice, BIG_ENTRIES, "big")
    _, token = tokens.token_create(alice, "slow readers")
    path = f"/api/sessions/{session.id}/export"
    size = _export_size(server.port, path, token)  # the process warm, its pages read once
    assert size > BIG_ENTRIES * 100 * 1024
    before = peak_kb(server.pid)
    socks = [_unread(server.port, path, token) for _ in range(UNREAD)]
    try:
        time.sleep(STALL_S - 1)
        grown = peak_kb(server.pid) - before
    finally:
        for sock in socks:
            sock.close()
    assert grown < PEAK_GROWTH_KB, f"the peak grew by {grown / 1024:.0f} MB"


def test_a_client_that_stops_reading_is_let_go(server: Any, alice: Any) -> None:
    session = _import(alice, BIG_ENTRIES, "big")
    _, token = tokens.token_create(alice, "stalled")
    path = f"/api/sessions/{session.id}/export"
    size = _export_size(server.port, path, token)
    sock = _unread(server.port, path, token)
    try:
        # Once the answer has begun, the server fills the buffers between it and the client,
        # waits, and lets go after STALL_S (however long a loaded machine took to begin).
        sock.settimeout(60)
        assert sock.recv(1, socket.MSG_PEEK)
        time.sleep(STALL_S + 3)
        got = _read_all(sock)
    finally:
        sock.close()
    # What the kernel's buffers had taken before the server stopped sending, not the export.
    assert got < size / 2, f"{got / MB:.1f} MB of {size / MB:.1f} MB arrived"
    # The server goes on serving.
    assert _export_size(server.port, path, token) == size


def test_a_slow_but_steady_reader_gets_every_byte(server: Any, alice: Any) -> None:
    session = _import(alice, 40, "smaller")  # about 4 MB
    _, token = tokens.token_create(alice, "steady")
    path = f"/api/sessions/{session.id}/export"
    size = _export_size(server.port, path, token)
    sock = _unread(server.port, path, token)
    try:
        # A second between bursts of a megabyte: slower than the server sends, never
        # stalled as long as its limit.
        got = _read_all(sock, pause_s=1.0, burst=MB)
    finally:
        sock.close()
    head = len(b"HTTP/1.1 200 OK\r\n")
    assert got > size + head  # the whole body, with the status line and the headers


def test_downloads_one_user_reads_slowly_leave_the_others_a_place(alice: Any, bob: Any) -> None:
    """Thirty downloads of Alice's that she never reads hold a third of the slots (eight
    of 24) while they wait for her, not all of them: Bob's request is answered meanwhile,
    where it waited its 3 s and got a 503 when one client could take every slot."""
    session = _import(alice, BIG_ENTRIES, "big")
    _, alices = tokens.token_create(alice, "hoarder")
    _, bobs = tokens.token_create(bob, "meanwhile")
    port = port_for(7)
    env = {"STRAND_HTTP_SEND_STALL_S": "60", "STRAND_HTTP_SLOT_WAIT_S": "3"}
    with serving(port, **env):
        socks = [_unread(port, f"/api/sessions/{session.id}/export", alices) for _ in range(30)]
        try:
            time.sleep(1)
            answer = requests.get(
                f"http://127.0.0.1:{port}/api/sessions",
                headers={"Authorization": f"Bearer {bobs}"},
                timeout=30,
            )
        finally:
            for sock in socks:
                sock.close()
    assert answer.status_code == 200, answer.text
