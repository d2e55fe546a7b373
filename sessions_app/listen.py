"""This process's one LISTEN connection (DESIGN §6, §7).

The store notifies each commit on `strand_events`, a cancel goes on `strand_control`, an
account change on the live feed's channel. A process listens on all of them on one
connection of its own, held by a thread of its own, so that the listener outlives any one
event loop (daphne's, a test's, or none at all in a command). It hands each notification to
the subscribers of its channel: the agent engine (a run waiting for an approval wakes up; a
cancel reaches the process that runs the turn) and the live feed (committed events fanned
out to this process's websockets).

A subscriber is called on the listener's thread, in the order the notifications arrive, and
must not block: each hands the notification on to its own loop. It is also told each time
the listener listens on its channels (the first time, and again after a lost connection,
when commits made meanwhile were not notified) and each time the connection is lost.

The listener starts with its first subscriber and stops, closing its connection, when the
last one leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import psycopg

from sessions_app import pg

log = logging.getLogger("strand.listen")

# How long the connection waits for a notification before it looks for channels that new
# subscribers brought (a LISTEN cannot be sent while it waits).
LOOK_S = 0.25
MAX_BACKOFF_S = 10.0


class Subscriber(Protocol):
    @property
    def channels(self) -> Sequence[str]: ...

    def on_listening(self) -> None:
        """The listener listens on this subscriber's channels (again, after a loss)."""
        ...

    def on_lost(self) -> None:
        """The connection is gone: notifications may be missed until `on_listening`."""
        ...

    def on_notify(self, channel: str, payload: str) -> None: ...


class _Listener:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.subscribers: list[Subscriber] = []
        self.connection: psycopg.AsyncConnection[Any] | None = None
        self._guard = threading.Lock()
        self._task: asyncio.Task[None] | None = None
        self.thread = threading.Thread(target=self._main, name="strand-listen", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._task = self.loop.create_task(self._run())
        with contextlib.suppress(asyncio.CancelledError):
            self.loop.run_until_complete(self._task)
        self.loop.close()

    def stop(self) -> None:
        def cancel() -> None:
            if self._task is not None:
                self._task.cancel()

        with contextlib.suppress(RuntimeError):  # the loop has already closed
            self.loop.call_soon_threadsafe(cancel)

    def snapshot(self) -> list[Subscriber]:
        with self._guard:
            return list(self.subscribers)

    async def _run(self) -> None:
        backoff = 0.25
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("the listener lost its connection; retrying", exc_info=True)
            for subscriber in self.snapshot():
                _call(subscriber.on_lost)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _listen(self) -> None:
        conn = await psycopg.AsyncConnection.connect(**pg.connection_params(), autocommit=True)
        self.connection = conn
        listened: set[str] = set()
        told: set[int] = set()
        try:
            while True:
                await self._listen_to_all(conn, listened, told)
                async for note in conn.notifies(timeout=LOOK_S):
                    for subscriber in self.snapshot():
                        if note.channel in subscriber.channels:
                            _call(subscriber.on_notify, note.channel, note.payload)
        finally:
            self.connection = None
            with contextlib.suppress(Exception):
                await conn.close()

    async def _listen_to_all(
        self, conn: psycopg.AsyncConnection[Any], listened: set[str], told: set[int]
    ) -> None:
        """LISTEN on every subscriber's channels not listened to yet, then tell each new
        subscriber that its channels are listened to."""
        subscribers = self.snapshot()
        for subscriber in subscribers:
            for channel in subscriber.channels:
                if channel not in listened:
                    # Channel names are the project's own identifiers, never input.
                    await conn.execute(f"LISTEN {channel}")
                    listened.add(channel)
        for subscriber in subscribers:
            if id(subscriber) not in told:
                told.add(id(subscriber))
                _call(subscriber.on_listening)


def _call(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except Exception:  # a broken subscriber must not take the others' notifications
        log.exception("a listener's subscriber failed")


_lock = threading.Lock()
_listener: _Listener | None = None


def subscribe(subscriber: Subscriber) -> None:
    """Hand `subscriber` the notifications of its channels, starting the listener if none
    runs; its `on_listening` is called once they are listened to."""
    global _listener
    with _lock:
        if _listener is None:
            _listener = _Listener()
            _listener.subscribers.append(subscriber)
            _listener.thread.start()
            return
        with _listener._guard:
            if not any(s is subscriber for s in _listener.subscribers):
                _listener.subscribers.append(subscriber)


def unsubscribe(subscriber: Subscriber, *, wait: bool = False) -> None:
    """Stop handing `subscriber` notifications; the last one to leave stops the listener
    and closes its connection (`wait`: before returning)."""
    global _listener
    with _lock:
        listener = _listener
        if listener is None:
            return
        with listener._guard:
            # By identity: a subscriber may be a dataclass that compares by value.
            listener.subscribers[:] = [s for s in listener.subscribers if s is not subscriber]
            if listener.subscribers:
                return
        _listener = None
    listener.stop()
    if wait and listener.thread is not threading.current_thread():
        listener.thread.join(10)


def connection() -> psycopg.AsyncConnection[Any] | None:
    """The listener's connection, while it has one."""
    listener = _listener
    return None if listener is None else listener.connection
