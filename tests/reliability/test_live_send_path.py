"""The live feed's send path in daphne (config/asgi.py) replaces two of its dependencies'
methods when their releases still have what it reads, and keeps theirs otherwise. A release
of Twisted or autobahn that leaves the process on the slow way fails here, not quietly in
`make bench`'s latency figures."""

from __future__ import annotations

from daphne.ws_protocol import WebSocketProtocol
from twisted.internet import tcp

import config.asgi  # noqa: F401  (installs the send path)


def test_socket_writes_go_out_at_once_with_the_installed_twisted() -> None:
    assert tcp.Connection.write.__module__ == "config.asgi"


def test_an_event_is_framed_once_for_all_viewers_with_the_installed_autobahn() -> None:
    assert WebSocketProtocol.serverSend.__module__ == "config.asgi"
