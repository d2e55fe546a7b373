"""Connections of our own to Postgres, beside Django's: the process's LISTEN
(`sessions_app.listen`) and the agent's turn locks hold one for as long as they listen or
hold, which Django's per-request connections are not made for; and Django's connection on
a thread of our own, kept usable between calls.

Their parameters are read from Django's default database as it is *now*, not at import:
under the test runner that is the test database, and a NOTIFY reaches only the listeners on
the database it was sent in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import connection, connections

T = TypeVar("T")


def connection_params() -> dict[str, Any]:
    """psycopg's keyword arguments for Django's default database (the ones it sets)."""
    settings = connections["default"].settings_dict
    params = {
        "dbname": settings.get("NAME"),
        "user": settings.get("USER"),
        "password": settings.get("PASSWORD"),
        "host": settings.get("HOST"),
        "port": settings.get("PORT"),
    }
    return {key: value for key, value in params.items() if value}


def with_connection(fn: Callable[..., T], *args: Any) -> T:
    """Run `fn` on a thread that keeps its Django connection between calls (the agent's and
    the websockets' database threads), first dropping a connection that an earlier error
    broke (a restarted Postgres, a killed backend): the next query then opens a fresh one."""
    if connection.connection is not None and connection.errors_occurred:
        if not connection.is_usable():
            connection.close()
        connection.errors_occurred = False
    return fn(*args)
