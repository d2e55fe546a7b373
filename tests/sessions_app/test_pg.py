"""Our own Postgres connections reach the database Django uses now (under the test runner,
the test database: a NOTIFY reaches only the listeners on the database it was sent in)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from sessions_app import pg


@pytest.mark.django_db
def test_the_parameters_reach_djangos_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        (expected,) = cursor.fetchone()
    assert expected.startswith("test_")  # the test database, not the one at import time
    with psycopg.connect(**pg.connection_params()) as own:
        assert own.execute("SELECT current_database()").fetchone() == (expected,)
