"""The live feed through a websocket, with the project's ASGI application (Origin check,
cookie sign-in, access rules) and real commits notified by Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from channels.db import database_sync_to_async
from channels.layers import channel_layers, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User

from config.asgi import application
from sessions_app import store
from sessions_app.live import listener as live
from sessions_app.models import Session
from tests.web.conftest import client_for, conversation, message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ORIGIN = (b"origin", b"http://127.0.0.1")


@pytest.fixture(autouse=True)
def fresh_channel_layer() -> Iterator[None]:
    # Each test runs its own event loop; an in-memory layer's queues belong to one loop.
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest_asyncio.fixture(autouse=True)
async def stop_listener() -> AsyncIterator[None]:
    yield
    await live.stop()


def cookie_for(user: User) -> bytes:
    client = client_for(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()


async def connect(
    user: User | None, session: Session, after_seq: int = -1, origin: bytes = ORIGIN[1]
) -> tuple[WebsocketCommunicator, bool]:
    headers = [(b"origin", origin), (b"host", b"127.0.0.1")]
    if user is not None:
        headers.append((b"cookie", await database_sync_to_async(cookie_for)(user)))
    communicator = WebsocketCommunicator(
        application, f"/ws/sessions/{session.id}/?after_seq={after_seq}", headers=headers
    )
    connected, _ = await communicator.connect(timeout=5)
    return communicator, connected


async def until_ready(communicator: WebsocketCommunicator) -> list[dict[str, Any]]:
    received: list[dict[str, Any]] = []
    while True:
        message_ = await communicator.receive_json_from(timeout=5)
        if message_["type"] == "ready":
            return received
        received.append(message_)


def append_user_message(session: Session, text: str) -> int:
    session.refresh_from_db()
    return store.append_events(session.id, session.last_seq, [message("user", text)]).last_seq


async def test_sends_the_events_after_the_given_seq_then_ready(alice: User) -> None:
    session = await database_sync_to_async(conversation)(alice)
    communicator, connected = await connect(alice, session, after_seq=0)
    assert connected
    events = await until_ready(communicator)
    assert [e["seq"] for e in events] == [1, 2]
    assert events[0]["event"] == "user/message" and events[0]["entry_id"]
    assert events[1]["data"]["entry"]["message"]["role"] == "assistant"
    await communicator.disconnect()


async def test_commits_from_another_connection_arrive_live_once(alice: User) -> None:
    session = await database_sync_to_async(conversation)(alice)
    communicator, _ = await connect(alice, session, after_seq=session.last_seq)
    assert await until_ready(communicator) == []
    # Another thread, another database connection, its own transaction: only NOTIFY tells.
    seq = await database_sync_to_async(append_user_message, thread_sensitive=False)(
        session, "from elsewhere"
    )
    event = await communicator.receive_json_from(timeout=5)
    assert event["seq"] == seq and event["event"] == "user/message"
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_reconnecting_with_the_last_seq_misses_nothing_and_repeats_nothing(
    alice: User,
) -> None:
    session = await database_sync_to_async(conversation)(alice)
    first, _ = await connect(alice, session)
    seen = [e["seq"] for e in await until_ready(first)]
    await first.disconnect()
    for text in ("while away 1", "while away 2"):
        await database_sync_to_async(append_user_message)(session, text)
    second, _ = await connect(alice, session, after_seq=seen[-1])
    seen += [e["seq"] for e in await until_ready(second)]
    assert seen == list(range(0, 5))
    await second.disconnect()


async def test_deltas_of_the_step_in_flight_are_forwarded(alice: User) -> None:
    session = await database_sync_to_async(conversation)(alice)
    communicator, _ = await connect(alice, session, after_seq=session.last_seq)
    await until_ready(communicator)
    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(
        live.group_name(str(session.id)),
        {
            "type": "session.delta",
            "session_id": str(session.id),
            "turn": 1,
            "step": 1,
            "kind": "text",
            "block": "0",
            "delta": "Hel",
            "name": None,
        },
    )
    delta = await communicator.receive_json_from(timeout=5)
    assert delta == {
        "type": "delta",
        "turn": 1,
        "step": 1,
        "kind": "text",
        "block": "0",
        "text": "Hel",
        "name": None,
    }
    await communicator.disconnect()


async def test_a_foreign_origin_is_refused(alice: User) -> None:
    session = await database_sync_to_async(conversation)(alice)
    communicator, connected = await connect(alice, session, origin=b"https://evil.example")
    assert not connected


async def test_another_user_is_refused(alice: User, bob: User) -> None:
    session = await database_sync_to_async(conversation)(alice)
    communicator, connected = await connect(bob, session)
    assert not connected


async def test_anonymous_is_refused(alice: User) -> None:
    session = await database_sync_to_async(conversation)(alice)
    communicator, connected = await connect(None, session)
    assert not connected


async def test_staff_may_watch(alice: User, carol: User) -> None:
    session = await database_sync_to_async(conversation)(alice)
    communicator, connected = await connect(carol, session)
    assert connected
    assert len(await until_ready(communicator)) == 3
    await communicator.disconnect()


async def test_a_lost_notification_connection_is_made_up_for(alice: User) -> None:
    """When the listener reconnects, every watcher re-reads: a commit made while it was not
    listening still arrives."""
    session = await database_sync_to_async(conversation)(alice)
    communicator, _ = await connect(alice, session, after_seq=session.last_seq)
    await until_ready(communicator)
    listener = live._listener
    assert listener is not None and listener.connection is not None
    await listener.connection.close()
    seq = await database_sync_to_async(append_user_message)(session, "during the gap")
    event = await communicator.receive_json_from(timeout=5)
    assert event["seq"] == seq
    await communicator.disconnect()


async def test_after_seq_parsing() -> None:
    from sessions_app.live.consumers import after_seq_of

    assert after_seq_of(b"after_seq=12") == 12
    assert after_seq_of(b"") == -1
    assert after_seq_of(b"after_seq=x") == -1
    assert after_seq_of(b"after_seq=-9") == -1


async def test_payload_parsing() -> None:
    assert live.parse_payload("abc:12") == ("abc", 12)
    assert live.parse_payload("abc:") == ("abc", None)
    assert live.parse_payload("junk") is None
    await asyncio.sleep(0)
