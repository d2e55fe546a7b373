"""The turn lock: a Postgres session-level advisory lock per session, all of a process's
held on one connection.

Its key is derived from the session's UUID (`sessions_app.turn_lock`). A second sender,
here or in another process, that cannot take it is refused (or, for steer/follow-up,
queues its input). Whether anyone holds it is a read (`selectors.turns.turn_lock_held`).

Why one shared connection, and not a connection per turn or a lease row:

- A connection per turn made every open turn (one waiting hours for an approval too) cost
  a Postgres connection: a hundred waiting turns used `max_connections` and the server
  answered everyone else with "too many clients". Here a process holds one lock
  connection whatever its number of turns.
- A lease row with a heartbeat would turn "the owner is dead" into "the owner was quiet
  for N seconds": recovery could close the turn of a live process that paused (a GC, a
  slow disk), and a dead process's turn would stay open for N seconds. A session-level
  advisory lock keeps DESIGN §7's guarantees as they were: one running turn per session
  across processes (the lock is exclusive), recovery closes only turns whose owner is dead
  (it must take the lock), and the lock dies with the process (Postgres drops it with the
  connection).

Advisory locks are re-entrant on one connection, so the process keeps the set of keys it
holds and refuses a key it already holds itself; the set and the connection change under
one thread lock. `ProcessLocks` is also what holds the per-user turn places
(`agent.admission`), so everything a process holds is on that one connection.

If the connection is lost (Postgres restarted, the network dropped), every lock on it is
gone. The next use, or the engine's periodic `check`, reconnects and takes the keys again;
a key that someone else took meanwhile is lost for good, and the engine cancels the run
that held it, so that it stops writing to a session it no longer owns.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import psycopg

from sessions_app import pg
from sessions_app.turn_lock import job_lock_key, turn_lock_key

log = logging.getLogger("strand.agent")


class ProcessLocks:
    """Every advisory lock this process holds, on one autocommit connection of its own."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._held: set[int] = set()
        self._lost: set[int] = set()

    def try_take(self, key: int) -> bool:
        """Take `key`; False when this process or another one holds it."""
        with self._mutex:
            if key in self._held:
                return False
            if self._locked(key):
                self._held.add(key)
                return True
            return False

    def release(self, key: int) -> None:
        """Let go of `key` (nothing if it was lost with the connection)."""
        with self._mutex:
            if key not in self._held:
                return
            self._held.discard(key)
            conn = self._conn
            if conn is None or conn.closed:
                return  # the lock went with the connection
            try:
                conn.execute("SELECT pg_advisory_unlock(%s)", [key])
            except psycopg.Error:
                # A broken connection holds nothing any more; the next use reconnects.
                self._drop()

    def check(self) -> set[int]:
        """Make sure the connection still holds every key: the keys lost since the last
        check (taken by another process while the connection was gone)."""
        with self._mutex:
            if self._held and self._conn is not None:
                try:
                    self._conn.execute("SELECT 1")
                except psycopg.Error:
                    self._drop()
            if self._held and (self._conn is None or self._conn.closed):
                try:
                    self._connection()
                except (psycopg.Error, OSError):
                    log.warning("turn locks: cannot reconnect to Postgres; retrying")
            lost, self._lost = self._lost, set()
            return lost

    @property
    def held(self) -> frozenset[int]:
        with self._mutex:
            return frozenset(self._held)

    def close(self) -> None:
        with self._mutex:
            self._held.clear()
            self._drop()

    # under the mutex

    def _locked(self, key: int) -> bool:
        for attempt in (1, 2):
            conn = self._connection()
            try:
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
            except psycopg.OperationalError:
                self._drop()
                if attempt == 2:
                    raise
                continue
            return bool(row and row[0])
        return False  # not reached

    def _connection(self) -> psycopg.Connection[Any]:
        """The lock connection; a new one takes back the keys the old one held."""
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self._conn = psycopg.connect(**pg.connection_params(), autocommit=True)
        for key in sorted(self._held):
            row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
            if not row or not row[0]:
                self._held.discard(key)
                self._lost.add(key)
        if self._lost:
            log.warning("turn locks: %d lost with the connection", len(self._lost))
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()


T = TypeVar("T")


class LockHolder(Protocol):
    """What a turn lock needs of the engine that runs it (`sessions_app.agent.engine`): its
    database threads and the process's lock connection. Named here, so the lock does not
    import the engine that imports it."""

    locks: ProcessLocks

    def db(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]: ...


class PgTurnLock:
    """A session's turn lock, held on the process's lock connection until released or
    until this process dies (Postgres then drops it with the connection)."""

    def __init__(self, engine: LockHolder, key: int) -> None:
        self._engine = engine
        self._key = key

    @classmethod
    def try_take(cls, engine: LockHolder, session_id: str) -> PgTurnLock | None:
        key = turn_lock_key(session_id)
        if not engine.locks.try_take(key):
            return None
        return cls(engine, key)

    @classmethod
    def try_take_job(cls, engine: LockHolder, session_id: str, job_id: str) -> PgTurnLock | None:
        """A background job's lock (`runtime.jobs`): held by the process running the job."""
        key = job_lock_key(session_id, job_id)
        if not engine.locks.try_take(key):
            return None
        return cls(engine, key)

    async def release(self) -> None:
        await self._engine.db(self._engine.locks.release, self._key)
