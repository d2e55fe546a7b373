"""Admission of websockets: past the limits, a socket is accepted and closed at once with
4503 ("try again later"), and admitted again once the process has caught up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from sessions_app.live import admission as live_admission
from sessions_app.live.admission import CLOSE_TRY_LATER, Admission

pytestmark = pytest.mark.asyncio


class SlowHandshakes:
    """An ASGI app whose sockets stay in their handshake until `go` is set."""

    def __init__(self) -> None:
        self.go = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await self.go.wait()
        await send({"type": "websocket.accept"})
        live_admission.accepted(scope)
        await send({"type": "websocket.send", "text": "ready"})
        live_admission.ready(scope)
        while (await receive())["type"] != "websocket.disconnect":
            pass


async def _open(app: Any) -> tuple[WebsocketCommunicator, asyncio.Task[Any]]:
    communicator = WebsocketCommunicator(app, "/ws/")
    return communicator, asyncio.ensure_future(communicator.connect(timeout=5))


async def _refused(app: Any) -> bool:
    communicator = WebsocketCommunicator(app, "/ws/")
    connected, _ = await communicator.connect(timeout=5)
    assert connected  # accepted, so that the close code reaches the client…
    closed = await communicator.receive_output(timeout=5)
    await communicator.wait()
    return bool(closed == {"type": "websocket.close", "code": CLOSE_TRY_LATER})


async def test_past_the_connecting_limit_a_socket_is_told_to_come_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STRAND_WS_MAX_CONNECTING", "2")
    inner = SlowHandshakes()
    app = Admission(inner)
    waiting = [await _open(app) for _ in range(2)]
    await asyncio.sleep(0.05)
    assert await _refused(app)
    assert live_admission.counts.refused >= 1
    inner.go.set()
    for communicator, connecting in waiting:
        assert (await connecting)[0]
        assert await communicator.receive_from(timeout=5) == "ready"
    # Caught up: the next one is admitted.
    communicator, connecting = await _open(app)
    assert (await connecting)[0]
    for c in [communicator, *(c for c, _ in waiting)]:
        await c.disconnect()
    assert live_admission.counts.connecting == 0 and live_admission.counts.open == 0


async def test_a_handshake_waiting_too_long_closes_the_door_until_it_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STRAND_WS_MAX_HANDSHAKE_WAIT_S", "0.2")
    inner = SlowHandshakes()
    app = Admission(inner)
    first, connecting = await _open(app)
    await asyncio.sleep(0.05)
    second, admitted = await _open(app)  # not yet behind: admitted, and waits too
    await asyncio.sleep(0.3)
    assert await _refused(app)
    inner.go.set()
    assert (await connecting)[0] and (await admitted)[0]
    third, connecting = await _open(app)
    assert (await connecting)[0]
    for c in (first, second, third):
        await c.disconnect()
    assert not live_admission.counts.handshaking
