"""This process's agent engine: the loop thread the runtime's turns run on, its database
threads, and its wake-ups from the process's listener.

Turns run as asyncio tasks on the engine's loop, a thread started on first use, so that a
turn outlives the request that started it whether the caller is an async consumer, a sync
view or a command. Database work runs on a small pool of threads with their own Django
connections. Nothing durable stays in memory: every fact is appended through the store, and
a restarted process rebuilds all it needs from the log.

Cross-process control. The engine subscribes to the process's one LISTEN connection
(`sessions_app.listen`) for `strand_events` (payload "<session id>:<last seq>", sent by the
store at commit): a run waiting for an approval decision wakes up and reads the log.
Cancellation is a NOTIFY on `strand_control` with payload "<session id>:cancel"; the process
running the turn cancels it.

Turn locks. Every turn lock and turn place the process holds is on one connection
(`agent.lock.ProcessLocks`), however many turns are open; every `LOCK_CHECK_S` the engine
makes sure that connection still holds them, and cancels a run whose lock was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection, connections

from runtime import Runtime
from sessions_app import listen, pg, store
from sessions_app.agent.admission import ProcessTurns
from sessions_app.agent.children import PostgresChildren
from sessions_app.agent.lock import ProcessLocks
from sessions_app.agent.log import PostgresLog
from sessions_app.turn_lock import turn_lock_key

log = logging.getLogger("strand.agent")

T = TypeVar("T")

CONTROL_CHANNEL = "strand_control"
EVENTS_CHANNEL = store.NOTIFY_CHANNEL
DB_THREADS = 4
# How often the lock connection is checked while it holds turn locks.
LOCK_CHECK_S = 5.0
# How long a turn waits for an approval decision by default (STRAND_APPROVAL_TIMEOUT_S).
DEFAULT_APPROVAL_TIMEOUT_S = 600.0


class Engine:
    """The agent loop thread, its database threads, its wake-ups and the runtime."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pool = ThreadPoolExecutor(DB_THREADS, thread_name_prefix="strand-db")
        self.locks = ProcessLocks()
        self.turns = ProcessTurns()
        self.runtime = Runtime(
            PostgresLog(self),
            approval_timeout_s=approval_timeout_s(),
            children=PostgresChildren(self),
        )
        self.latest: dict[str, int] = {}  # session → newest seq we heard of
        self.waiters: dict[str, set[asyncio.Event]] = {}
        self.listening = threading.Event()
        self._wakeups = _Wakeups(self)
        self._watcher: asyncio.Task[None] | None = None
        self.thread = threading.Thread(target=self._main, name="strand-agent", daemon=True)
        self.thread.start()
        self.call(self._start())

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _start(self) -> None:
        listen.subscribe(self._wakeups)
        self._watcher = self.loop.create_task(self._watch_locks())

    # calling in

    def call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `work` on the agent loop and wait for its result (from any other thread)."""
        if threading.current_thread() is self.thread:
            raise RuntimeError("agent services cannot be called from the agent loop itself")
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    async def acall(self, work: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.loop))

    async def db(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.loop.run_in_executor(self.pool, partial(pg.with_connection, fn, *args))

    # waking runs

    def poke(self, session_id: str, seq: int) -> None:
        """Note that events up to `seq` exist (from a NOTIFY, or our own append)."""
        if seq > self.latest.get(session_id, -1):
            self.latest[session_id] = seq
        for waiter in self.waiters.get(session_id, ()):
            waiter.set()

    async def wait_for_events(self, session_id: str, after_seq: int, timeout: float) -> None:
        if self.latest.get(session_id, -1) > after_seq:
            return
        waiter = asyncio.Event()
        self.waiters.setdefault(session_id, set()).add(waiter)
        try:
            await asyncio.wait_for(waiter.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self.waiters.get(session_id, set()).discard(waiter)

    async def _watch_locks(self) -> None:
        while True:
            await asyncio.sleep(LOCK_CHECK_S)
            try:
                lost = await self.db(self.locks.check)
            except Exception:
                log.exception("agent: checking the turn locks failed")
                continue
            for sid in list(self.runtime.runs):
                if turn_lock_key(sid) in lost:
                    log.warning("session %s: turn lock lost with its connection; cancelling", sid)
                    self.runtime.cancel_local(sid)

    def _on_notify(self, channel: str, payload: str) -> None:
        session_id, _, rest = payload.partition(":")
        if channel == CONTROL_CHANNEL:
            if rest == "cancel":
                self.runtime.cancel_local(session_id)
            return
        with contextlib.suppress(ValueError):
            self.poke(session_id, int(rest))

    # stopping

    def shutdown(self, timeout: float = 10.0) -> None:
        async def stop() -> None:
            await self.runtime.stop_all(timeout)
            if self._watcher is not None:
                self._watcher.cancel()
                await asyncio.gather(self._watcher, return_exceptions=True)

        try:
            self.call(stop(), timeout + 5)
        finally:
            listen.unsubscribe(self._wakeups, wait=True)
            self._close_db_threads()
            self.locks.close()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.pool.shutdown(wait=True)

    def _close_db_threads(self) -> None:
        # One job per thread (the barrier keeps each on its own thread) closes its
        # Django connections, so that no connection outlives the engine.
        barrier = threading.Barrier(DB_THREADS, timeout=5)

        def close() -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()
            connections.close_all()

        for future in [self.pool.submit(close) for _ in range(DB_THREADS)]:
            future.result(10)


class _Wakeups:
    """The engine's subscription to the process's listener: commits wake the runs that
    wait for events, cancels reach the runs they name (on the engine's loop)."""

    channels = (EVENTS_CHANNEL, CONTROL_CHANNEL)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def on_listening(self) -> None:
        self.engine.listening.set()

    def on_lost(self) -> None:
        self.engine.listening.clear()

    def on_notify(self, channel: str, payload: str) -> None:
        self.engine.loop.call_soon_threadsafe(self.engine._on_notify, channel, payload)


def approval_timeout_s() -> float | None:
    """How long a turn waits for an approval decision (None or 0 in settings: forever)."""
    value = getattr(settings, "STRAND_APPROVAL_TIMEOUT_S", DEFAULT_APPROVAL_TIMEOUT_S)
    return float(value) if value else None


def broadcast_cancel(session_id: str) -> None:
    """Ask the process running the session's turn, wherever it is, to cancel it: a NOTIFY
    on the control channel, which every engine's listener hears."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_notify(%s, %s)", [CONTROL_CHANNEL, f"{session_id}:cancel"])


# --- the process's one engine ------------------------------------------------------------

_lock = threading.Lock()
_instance: Engine | None = None


def engine() -> Engine:
    """This process's engine, started on first use."""
    global _instance
    with _lock:
        if _instance is None:
            _instance = Engine()
        return _instance


def engine_if_started() -> Engine | None:
    return _instance


def engine_stop(timeout: float = 10.0) -> None:
    """Stop the engine, if one runs; the next use starts a new one."""
    global _instance
    with _lock:
        stopping, _instance = _instance, None
    if stopping is not None:
        stopping.shutdown(timeout)
