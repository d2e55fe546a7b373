"""A websocket server for the send-path test, served by daphne with the live feed's
changes to Twisted and autobahn applied (`sessions_app.live.wire`).

Every connection is sent the same texts, the very same `str` objects (as the live feed
hands one encoded event to every viewer), then "done". The first text names the methods
daphne sends with, so the test knows the changed ones were in use.
"""

from __future__ import annotations

from typing import Any

from daphne.ws_protocol import WebSocketProtocol
from twisted.internet import tcp

from sessions_app.live import wire

COUNT = 600
ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def text(index: int) -> str:
    """Text `index`: its number, then 1 byte to 64 KB of the alphabet from its own letter on
    (so a byte lost, repeated or moved shows)."""
    size = (index * 7919) % 65_536 + 1
    letters = ALPHABET[index % 26 :] + ALPHABET[: index % 26]
    return f"{index:05d}:" + (letters * (size // 26 + 1))[:size]


TEXTS = [text(index) for index in range(COUNT)]

wire.install()


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "websocket"
    message = await receive()
    assert message["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    methods = f"{tcp.Connection.write.__module__} {WebSocketProtocol.serverSend.__module__}"
    await send({"type": "websocket.send", "text": methods})
    for shared in TEXTS:
        await send({"type": "websocket.send", "text": shared})
    await send({"type": "websocket.send", "text": "done"})
    while (await receive())["type"] != "websocket.disconnect":
        pass
