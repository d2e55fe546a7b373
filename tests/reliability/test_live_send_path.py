"""The live feed's send path in daphne: `sessions_app.live.wire` replaces methods of two of
its dependencies when their releases still have what it reads, and keeps theirs otherwise.
A release of Twisted or autobahn that leaves the process on the slow way fails here, not
quietly in `make bench`'s latency figures; a change that loses or reorders bytes when a
reader is slow fails here too."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from daphne.ws_protocol import WebSocketProtocol
from twisted.internet import tcp
from websockets.sync.client import ClientConnection, connect

import config.asgi  # noqa: F401  (installs the send path)
from deploy.daphne import ensure_free, wait_for_port
from tests.reliability import slow_reader_app

ROOT = Path(__file__).resolve().parents[2]
PORT = 29_000 + os.getpid() % 1000
WRITES = "sessions_app.live.wire.eager_socket_writes"
FRAMES = "sessions_app.live.wire.frames_shared"


def test_socket_writes_go_out_at_once_with_the_installed_twisted() -> None:
    assert tcp.Connection.write.__module__ == WRITES


def test_an_event_is_framed_once_for_all_viewers_with_the_installed_autobahn() -> None:
    assert WebSocketProtocol.serverSend.__module__ == FRAMES


def test_strand_wire_tuning_0_serves_with_the_libraries_as_released() -> None:
    probe = (
        "import config.asgi\n"
        "from daphne.ws_protocol import WebSocketProtocol\n"
        "from twisted.internet import tcp\n"
        "print(tcp.Connection.write.__module__, WebSocketProtocol.serverSend.__module__)\n"
    )
    found = {}
    for value in ("0", "1"):
        env = {
            **os.environ,
            "STRAND_WIRE_TUNING": value,
            "DJANGO_SETTINGS_MODULE": "config.settings",
        }
        done = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        found[value] = done.stdout.split()
    assert found["0"][1] == "daphne.ws_protocol"
    assert found["0"][0].startswith("twisted.")  # Twisted's own write
    assert found["1"] == [WRITES, FRAMES]


def _texts(client: ClientConnection, pause_every: int) -> list[str]:
    """Every text up to "done"; pausing after every `pause_every`-th makes a slow reader."""
    texts = []
    while (text := client.recv(timeout=60)) != "done":
        assert isinstance(text, str)
        texts.append(text)
        if pause_every and len(texts) % pause_every == 0:
            time.sleep(0.01)  # the reader is slow; nothing here is timed
    return texts


def _client(rcvbuf: int | None) -> ClientConnection:
    sock = socket.socket()
    if rcvbuf is not None:  # a small window: the server's socket fills, its writes are cut
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(60)
    sock.connect(("127.0.0.1", PORT))
    return connect(f"ws://127.0.0.1:{PORT}/", sock=sock, max_size=None, open_timeout=60)


def test_a_slow_reader_gets_every_byte_in_order_beside_a_fast_one() -> None:
    ensure_free(PORT)
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("daphne")),
            "-b",
            "127.0.0.1",
            "-p",
            str(PORT),
            "tests.reliability.slow_reader_app:application",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(PORT, server)
        fast_texts: list[str] = []
        with _client(rcvbuf=4096) as slow, _client(rcvbuf=None) as fast:
            assert slow.recv(timeout=60) == f"{WRITES} {FRAMES}"
            assert fast.recv(timeout=60) == f"{WRITES} {FRAMES}"
            reader = threading.Thread(target=lambda: fast_texts.extend(_texts(fast, 0)))
            reader.start()
            time.sleep(1)  # let the server's buffers for the slow reader fill first
            slow_texts = _texts(slow, pause_every=5)
            reader.join(timeout=120)
        assert slow_texts == slow_reader_app.TEXTS
        assert fast_texts == slow_reader_app.TEXTS
    finally:
        server.terminate()
        server.wait(timeout=30)
