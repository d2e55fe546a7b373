"""The turn lock: a Postgres session-level advisory lock per session.

Its key is derived from the session's UUID (`sessions_app.turn_lock`). The process that
runs a turn takes it with `pg_try_advisory_lock` on a connection of its own and holds it
for the turn's whole life, so that it dies with the process. A second sender, here or in another process,
that cannot take it is refused (or, for steer/follow-up, queues its input). Whether anyone
holds it is a read (`selectors.turns.turn_lock_held`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from django.db import connections

from sessions_app.turn_lock import turn_lock_key

if TYPE_CHECKING:
    from sessions_app.agent.engine import Engine


def conninfo() -> dict[str, Any]:
    """Connection parameters for the agent's own psycopg connections (lock, listener)."""
    settings = connections["default"].settings_dict
    info = {
        "dbname": settings.get("NAME"),
        "user": settings.get("USER"),
        "password": settings.get("PASSWORD"),
        "host": settings.get("HOST"),
        "port": settings.get("PORT"),
    }
    return {key: value for key, value in info.items() if value}


class PgTurnLock:
    """The advisory lock, held on a connection of its own until released or until this
    process dies (Postgres then drops it with the connection)."""

    def __init__(self, engine: Engine, conn: psycopg.Connection[Any], key: int) -> None:
        self._engine = engine
        self._conn = conn
        self._key = key

    @classmethod
    def try_take(cls, engine: Engine, session_id: str) -> PgTurnLock | None:
        key = turn_lock_key(session_id)
        conn = psycopg.connect(**conninfo(), autocommit=True)
        try:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
        except BaseException:
            conn.close()
            raise
        if not row or not row[0]:
            conn.close()
            return None
        return cls(engine, conn, key)

    async def release(self) -> None:
        await self._engine.db(self._release)

    def _release(self) -> None:
        try:
            if not self._conn.closed:
                self._conn.execute("SELECT pg_advisory_unlock(%s)", [self._key])
        finally:
            self._conn.close()
