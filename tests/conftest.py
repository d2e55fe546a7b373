from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

# Tests decide when recovery runs; servers they start in-process or as children must not
# close turns behind their back.
os.environ.setdefault("STRAND_RECOVER_AT_START", "0")
# Servers started as children hash and check passwords as the tests do (tests/hashers.py).
os.environ.setdefault("STRAND_PASSWORD_HASHERS", "tests.hashers.QuickPBKDF2PasswordHasher")


# The personas, defined here once for every test: Alice owns the sessions under test, Bob
# is another user, Carol is staff (she may read every session and change none but her own).
# Each password is the name followed by "-pass-1234".


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(username="alice", password="alice-pass-1234")


@pytest.fixture
def bob(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(username="bob", password="bob-pass-1234")


@pytest.fixture
def carol(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(
        username="carol", password="carol-pass-1234", is_staff=True
    )


@pytest.fixture(scope="session", autouse=True)
def _quick_password_hashing() -> Iterator[None]:
    # Users are made in nearly every test: Django's full hashing would be a large part of
    # the run. (Set here too: the settings may have been read before this file.)
    with override_settings(PASSWORD_HASHERS=os.environ["STRAND_PASSWORD_HASHERS"].split(",")):
        yield


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> None:
    """The test database, with autovacuum off for its tables.

    Most tests write in a transaction that is rolled back, so the tables fill with pages of
    dead rows. Autovacuum's ANALYZE of such a table records no live rows over all those
    pages, and the planner then reads that density as "empty": a session a test has just
    grown to 10,000 entries is estimated at one row, the index on (session, parent, seq)
    looks as good as the (session, entry_id) key for a lookup by id, and a path walk
    filters the whole session at every step (a 25 s test took 331 s in one run). A server's
    statistics come from committed rows; with autovacuum off here the planner estimates
    each table from its current size, as it does for a table never analyzed, and the tests
    that ANALYZE do so themselves.
    """
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cur:
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        for (table,) in cur.fetchall():
            cur.execute(
                f'ALTER TABLE "{table}" SET '
                "(autovacuum_enabled = off, toast.autovacuum_enabled = off)"
            )


@pytest.fixture(autouse=True)
def _workspaces_in_tmp(settings: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Sessions made in a test get their owner's folder under a temporary root, never under
    # the project's own `.strand` (tests that need a particular root set their own).
    settings.STRAND_WORKSPACE_ROOTS = [str(tmp_path_factory.mktemp("workspaces"))]


@pytest.fixture
def serve_preset(monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """Offer a preset in the server's configuration (`STRAND_PRESETS`) for this test and
    return its name. Presets are the server's: a test that needs other settings serves a
    preset and names it, as an operator would, rather than storing one on a session."""

    def serve(name: str, /, **preset: Any) -> str:
        offered = json.loads(os.environ.get("STRAND_PRESETS") or "{}")
        offered[name] = preset
        monkeypatch.setenv("STRAND_PRESETS", json.dumps(offered))
        return name

    return serve
