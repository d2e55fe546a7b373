"""Committed events from any process to this process's websockets (DESIGN §6).

The append path issues `NOTIFY strand_events, '<session id>:<last seq>'` inside its
transaction; Postgres delivers it at commit, to every connection that listens, in every
process. Each process listens on one connection (`sessions_app.listen`, which the agent
engine subscribes to as well); the live listener is a task on the websockets' event loop
that takes that connection's notifications in order. On a notification for a session that
local websockets watch, it reads the new events once, encodes each once, and hands them to
those websockets as a `session.events` message, by calling each socket's `deliver` directly (no trip through
the channel layer: at 200 viewers that trip, a copy, a queue and a task wake-up per viewer,
was most of the delivery time); a websocket sends the events that follow its own cursor and,
should it see a gap, reads the log from its cursor instead. A notification carries no
event data, so a lost or doubled notification costs one read and never a missing or
repeated event. (Reading once per process, not once per websocket, is what lets one
process serve hundreds of viewers of a session.)

Started lazily by the first websocket that subscribes (daphne has no lifespan hook), and
started again on another event loop if the first one has gone (tests run one loop per test).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer

from sessions_app import listen
from sessions_app.live import access as live_access
from sessions_app.live import db as live_db
from sessions_app.live_protocol import (
    committed_message,
    encode_event,
    events_message,
    group_name,
    parse_payload,
)
from sessions_app.store import NOTIFY_CHANNEL, events_after

# The feed's shapes are `live_protocol`'s; these names stay importable from here.
__all__ = [
    "committed_message",
    "events_message",
    "group_name",
    "parse_payload",
    "stop",
    "subscribe",
    "subscriber_count",
    "unsubscribe",
    "wait_listening",
]

log = logging.getLogger("strand.live")

# How long a subscriber waits for the listener's first LISTEN before reading the log anyway
# (the listener nudges every subscriber once it is listening, so nothing is lost).
READY_TIMEOUT_S = 5.0
# What the process's listener says besides notifications, queued in order with them.
_LISTENING = ("", "listening")
_LOST = ("", "lost")


# Most events read and encoded in one go for a notification; a larger batch (an import)
# leaves the rest to each websocket's own read.
FETCH_LIMIT = 200


@dataclass
class _Listener:
    loop: asyncio.AbstractEventLoop
    subscribers: dict[str, set[str]] = field(default_factory=dict)  # session → channels
    # channel → a coroutine function that takes a `session.events` message directly
    deliverers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = field(default_factory=dict)
    fetched: dict[str, int] = field(default_factory=dict)  # session → last seq read here
    listening: asyncio.Event = field(default_factory=asyncio.Event)
    listened: bool = False  # has listened before (so a LISTEN now follows a lost connection)
    task: asyncio.Task[None] | None = None
    # (channel, payload) from the process's listener, in the order it heard them
    notes: asyncio.Queue[tuple[str, str]] = field(default_factory=asyncio.Queue)

    channels: ClassVar[tuple[str, ...]] = (NOTIFY_CHANNEL, live_access.ACCOUNT_CHANNEL)

    @property
    def connection(self) -> Any:
        """The process's LISTEN connection, while it has one."""
        return listen.connection()

    def start(self) -> None:
        self.task = self.loop.create_task(self._run(), name="strand-live-listener")
        listen.subscribe(self)

    # --- called on the process listener's thread ---

    def on_notify(self, channel: str, payload: str) -> None:
        self._hand((channel, payload))

    def on_listening(self) -> None:
        self._hand(_LISTENING)

    def on_lost(self) -> None:
        self._hand(_LOST)

    def _hand(self, note: tuple[str, str]) -> None:
        try:
            self.loop.call_soon_threadsafe(self.notes.put_nowait, note)
        except RuntimeError:  # this listener's loop has gone
            listen.unsubscribe(self)

    # --- on the websockets' loop ---

    async def _run(self) -> None:
        while True:
            channel, payload = await self.notes.get()
            try:
                await self._take(channel, payload)
            except asyncio.CancelledError:
                raise
            except Exception:
                # Whatever was missed, every socket reads again from its own cursor.
                log.warning("live listener: a notification failed; rereading", exc_info=True)
                with contextlib.suppress(Exception):
                    live_access.recheck_all_soon()
                    await self._nudge_all()

    async def _take(self, channel: str, payload: str) -> None:
        if (channel, payload) == _LISTENING:
            self.listening.set()
            # Commits made while this listener was not listening were not notified here.
            # (Sockets wait for the first LISTEN before their access check: `wait_listening`.)
            if self.listened:
                live_access.recheck_all_soon()
            self.listened = True
            await self._nudge_all()
        elif (channel, payload) == _LOST:
            self.listening.clear()
        elif channel == live_access.ACCOUNT_CHANNEL:
            # Awaited before the next notification: an event committed after an account
            # change never reaches a socket that the change shuts out.
            await live_access.account_changed(payload)
        else:
            parsed = parse_payload(payload)
            if parsed is not None:
                await self._forward(*parsed)

    async def _forward(self, session_id: str, last_seq: int | None) -> None:
        channels = self.subscribers.get(session_id)
        if not channels:
            return
        message = committed_message(last_seq)
        if last_seq is not None:
            message = await self._read(session_id, last_seq) or message
        layer = get_channel_layer()
        assert layer is not None
        for channel in list(channels):
            deliver = self.deliverers.get(channel)
            if deliver is not None and message["type"] == "session.events":
                # Straight to the socket: one call per viewer instead of a trip through the
                # channel layer (a copy, a queue and a task wake-up per viewer and event).
                try:
                    await deliver(message)
                except Exception:
                    log.debug("a viewer went away during delivery", exc_info=True)
                continue
            with contextlib.suppress(ChannelFull):
                # A full channel already holds messages that will bring this commit too.
                await layer.send(channel, message)

    async def _read(self, session_id: str, last_seq: int) -> dict[str, Any] | None:
        """The events up to `last_seq` not read here yet, each encoded once."""
        after = self.fetched.get(session_id, last_seq - 1)
        if after >= last_seq:
            return None
        if last_seq - after > FETCH_LIMIT:
            self.fetched[session_id] = last_seq
            return None  # each websocket reads a large batch itself
        records = await live_db.run(events_after, session_id, after, FETCH_LIMIT)
        records = [r for r in records if r.seq <= last_seq]
        self.fetched[session_id] = max(last_seq, after)
        return events_message([[r.seq, encode_event(r)] for r in records], last_seq)

    async def _nudge_all(self) -> None:
        for session_id in list(self.subscribers):
            await self._forward(session_id, None)

    async def stop(self) -> None:
        # The last subscriber to leave closes the process's connection: waited for here.
        await asyncio.to_thread(listen.unsubscribe, self, wait=True)
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        self.task = None


_listener: _Listener | None = None


def _current() -> _Listener:
    """This process's listener on the running loop, started on first use."""
    global _listener
    loop = asyncio.get_running_loop()
    if _listener is None or _listener.loop is not loop:
        # A listener on another (finished) loop is abandoned with it.
        if _listener is not None:
            listen.unsubscribe(_listener)
        _listener = _Listener(loop=loop)
        _listener.start()
    elif _listener.task is None or _listener.task.done():
        _listener.start()
    return _listener


async def wait_listening() -> None:
    """Start this process's listener if needed; return once it listens (or after a timeout).
    A socket waits for this before checking its access, so that an account change committed
    after the check is notified here (see `live_access`)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_current().listening.wait(), READY_TIMEOUT_S)


async def subscribe(
    session_id: str,
    channel_name: str,
    deliver: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> None:
    """Forward commits of `session_id` to `channel_name`; returns once the listener is
    listening (or after a timeout: the listener nudges everyone when it starts)."""
    listener = _current()
    listener.subscribers.setdefault(session_id, set()).add(channel_name)
    if deliver is not None:
        listener.deliverers[channel_name] = deliver
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(listener.listening.wait(), READY_TIMEOUT_S)


def unsubscribe(session_id: str, channel_name: str) -> None:
    listener = _listener
    if listener is None:
        return
    channels = listener.subscribers.get(session_id)
    if channels is None:
        return
    channels.discard(channel_name)
    listener.deliverers.pop(channel_name, None)
    if not channels:
        del listener.subscribers[session_id]
        listener.fetched.pop(session_id, None)


def subscriber_count() -> int:
    listener = _listener
    return 0 if listener is None else sum(len(c) for c in listener.subscribers.values())


async def stop() -> None:
    """Stop this process's listener and close its connections (tests, shutdown)."""
    global _listener
    listener, _listener = _listener, None
    if listener is not None:
        await listener.stop()
    await asyncio.to_thread(live_db.close_connections)
