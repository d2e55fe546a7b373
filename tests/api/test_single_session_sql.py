"""Ready to be distributed: every statement the doors run against the session log names one
session (`tests/sql_audit.py` says how that is judged, and which cross-session reads are
the listed exceptions).

One walk goes through every door with real data: a Pi file imported through the API, a
turn of the offline agent with a tool call and its approval, then every GET route of the
pages and the API (each view, the tree and its cursors, exports, files, shares, search,
usage, the admin), a live socket read to `ready`, and the management commands."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from config.asgi import application
from sessions_app import pg, services, store
from sessions_app.live import listener as live
from sessions_app.models import Event, Session
from sessions_app.services.demo import PI_DEMO_FILE
from tests import sql_audit
from tests.api.conftest import (
    OFFLINE_PRESET,
    Api,
    body_of,
    content_of,
    converse,
    tree_walk,
)

pytestmark = pytest.mark.django_db(transaction=True)


def routes() -> Iterator[str]:
    """Every URL pattern of the project, as written (`sessions/<uuid:session_id>/`)."""

    def walk(patterns: list[Any], prefix: str) -> Iterator[str]:
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                yield prefix + str(p.pattern)

    yield from walk(get_resolver().url_patterns, "/")


def fill(route: str, values: dict[str, str]) -> str | None:
    """The route with its parameters filled from `values`; None when one is unknown."""
    if "(?P<" in route or "^" in route:
        return None
    missing = False

    def value(match: re.Match[str]) -> str:
        nonlocal missing
        name = match.group(2)
        if name not in values:
            missing = True
            return ""
        return values[name]

    filled = re.sub(r"<(?:(\w+):)?(\w+)>", value, route)
    return None if missing else filled


@pytest.fixture
def audited_walk(
    alice: Any, django_user_model: Any, workspace: Path, as_alice: Api, tmp_path: Path
) -> list[sql_audit.Statement]:
    pages = Client()
    pages.force_login(alice)
    staff = Client()  # staff with every permission: the admin's lists too
    staff.force_login(django_user_model.objects.create_superuser("dave", password="dave-pass-1"))
    with sql_audit.recorded() as recorder:
        # The writes: an import, a new session, a turn with a tool call (approved).
        with PI_DEMO_FILE.open("rb") as f:
            imported = as_alice.client.post("/api/sessions/import", {"file": f})
        assert imported.status_code == 201, imported.content
        pi = Session.objects.get(id=body_of(imported)["session"]["id"])
        made = as_alice.post("/sessions", {"title": "walk", "preset": OFFLINE_PRESET})
        assert made.status_code == 201, made.content
        turn = Session.objects.get(id=body_of(made)["id"])
        (Path(turn.cwd) / "notes.txt").write_text("hello world\n")
        events = converse(as_alice, turn, "read notes.txt")
        assert any(e.type == "tool/result" for e in events)
        turn.refresh_from_db()
        share = body_of(as_alice.post(f"/sessions/{turn.id}/shares", {}))
        request_seq = Event.objects.filter(session=turn, type="request/sent").values_list(
            "seq", flat=True
        )[0]
        fetched = 0
        for session in (turn, pi):
            session.refresh_from_db()
            values = {
                "session_id": str(session.id),
                "seq": str(request_seq if session is turn else 0),
                "group": "1",
                "file_path": "notes.txt",
                "token": share["token"],
                "share_id": str(share["id"]),
                "object_id": str(session.pk),
                "rest": "nothing-here",
            }
            for route in routes():
                url = fill(route, values)
                if url is None or url.startswith("/accounts/logout"):
                    continue
                client = staff if url.startswith("/admin/") else pages
                if url.startswith("/api/"):
                    client = as_alice.client
                response = client.get(url)
                assert response.status_code < 500, (url, response.status_code)
                fetched += response.status_code == 200
                content_of(response)
            base = f"/sessions/{session.id}/"
            leaf = session.leaf_entry_id or ""
            for query in ("view=chat", "view=trace", "view=context", "view=files", "tree=1"):
                assert pages.get(f"{base}?{query}&entry={leaf}").status_code == 200
            for query in ("format=pi", "format=html"):
                assert content_of(pages.get(f"/api{base}export?{query}"))
            rows, _ = tree_walk(as_alice, session.id, limit=5)
            assert rows
            chat = body_of(as_alice.get(f"{base}views/chat?limit=2"))
            assert chat
            assert as_alice.get(f"{base}events?after_seq=-1&limit=3").status_code == 200
        assert fetched > 40
        assert as_alice.get("/search?q=notes").status_code == 200
        assert pages.get("/search?q=notes").status_code == 200
        _read_live(alice, turn)
        call_command("events", str(turn.id), stdout=_Sink())
        call_command("export_pi", str(pi.id), "-o", str(tmp_path / "out.jsonl"), stdout=_Sink())
        call_command("verify", str(turn.id), str(pi.id), stdout=_Sink())
        call_command("context", str(turn.id), stdout=_Sink())
        call_command("recover", str(turn.id), stdout=_Sink())
        call_command("recover", stdout=_Sink())
        call_command("import_pi", str(PI_DEMO_FILE), "--owner", alice.username, stdout=_Sink())
        pi.refresh_from_db()
        fork = as_alice.post(f"/sessions/{pi.id}/fork", {"entry_id": pi.leaf_entry_id})
        assert fork.status_code == 201, fork.content
        assert as_alice.delete(f"/sessions/{body_of(fork)['id']}").status_code == 204
    return recorder.statements


class _Sink:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def _read_live(user: Any, session: Session) -> None:
    channel_layers.backends.clear()
    cookie = f"{settings.SESSION_COOKIE_NAME}={_cookie(user)}".encode()

    async def read() -> int:
        communicator = WebsocketCommunicator(
            application,
            f"/ws/sessions/{session.id}/?after_seq=-1",
            headers=[
                (b"origin", b"http://127.0.0.1"),
                (b"host", b"127.0.0.1"),
                (b"cookie", cookie),
            ],
        )
        connected, _ = await communicator.connect(timeout=5)
        assert connected
        count = 0
        while (await communicator.receive_json_from(timeout=5))["type"] != "ready":
            count += 1
        await communicator.disconnect()
        await live.stop()
        return count

    assert async_to_sync(read)() == session.last_seq + 1
    channel_layers.backends.clear()


def _cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def test_every_door_reads_the_log_one_session_at_a_time(
    audited_walk: list[sql_audit.Statement],
) -> None:
    with psycopg.connect(**pg.connection_params()) as conn:
        found = sql_audit.violations(audited_walk, conn)
    assert not found, "\n".join(str(v) for v in found)
    # The listed cross-session readers were walked too (the audit desk, by staff).
    assert any(sql_audit.excepted(s) for s in audited_walk)
    # The walk went where it says: reads of each layer that touches the log were recorded.
    origins = {name for s in audited_walk for name in s.origin}
    for reader in (
        "sessions_app.store.events_after",
        "sessions_app.selectors.tree",
        "sessions_app.live",
        "sessions_app.web.html_export",
        "sessions_app.management.commands.verify",
        "sessions_app.agent",
    ):
        assert any(o.startswith(reader) for o in origins), reader


# --- the judge itself ---------------------------------------------------------------


@pytest.fixture
def judge() -> Iterator[psycopg.Connection]:
    with psycopg.connect(**pg.connection_params()) as conn:
        yield conn


SID = "'00000000-0000-0000-0000-000000000001'"


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT data FROM sessions_app_entry WHERE session_id = {SID} AND entry_id = 'a'",
        f"SELECT seq FROM sessions_app_event WHERE session_id IN ({SID}, {SID}) ORDER BY seq",
        f"SELECT e.data FROM sessions_app_session s JOIN sessions_app_entry e "
        f"ON e.session_id = s.id AND e.entry_id = s.leaf_entry_id WHERE s.id = {SID}",
        "SELECT s.id, (SELECT count(*) FROM sessions_app_event e WHERE e.session_id = s.id) "
        "FROM sessions_app_session s WHERE s.owner_id = 1",
        f"DELETE FROM sessions_app_entry WHERE session_id = {SID}",
        "INSERT INTO sessions_app_event (session_id, seq, type, schema_version, time, data, "
        f"ignorable) VALUES ({SID}, 1, 't', 1, now(), '{{}}', false)",
    ],
)
def test_the_judge_passes_a_statement_that_names_its_sessions(
    judge: psycopg.Connection, sql: str
) -> None:
    assert sql_audit.violations([sql_audit.Statement(sql, ("x.y",))], judge) == []


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT data FROM sessions_app_entry WHERE entry_id = 'a'",
        "SELECT count(*) FROM sessions_app_event WHERE type = 'turn/start'",
        # A lookup by the table's own id, below a read of one session, reads every shard.
        f"SELECT x.data FROM sessions_app_entry e CROSS JOIN LATERAL (SELECT data FROM "
        f"sessions_app_entry WHERE id = e.id LIMIT 1) x WHERE e.session_id = {SID}",
        "UPDATE sessions_app_session s SET title = 't' FROM sessions_app_event e "
        "WHERE e.id = 5 AND s.id = e.session_id",
        "SELECT nonsense FROM sessions_app_entry",
    ],
)
def test_the_judge_refuses_a_statement_that_reads_across_sessions(
    judge: psycopg.Connection, sql: str
) -> None:
    [found] = sql_audit.violations([sql_audit.Statement(sql, ("x.y",))], judge)
    assert "sessions_app_e" in found.reason or "could not be planned" in found.reason


def test_a_listed_exception_is_not_judged(judge: psycopg.Connection) -> None:
    sql = "SELECT count(*) FROM sessions_app_event WHERE type = 'request/sent'"
    statement = sql_audit.Statement(sql, ("sessions_app.selectors.audit.audit_count", "x.y"))
    assert sql_audit.excepted(statement)
    assert sql_audit.violations([statement], judge) == []


def test_recording_sees_djangos_cursors_and_psycopgs_own(alice: Any) -> None:
    session = services.session_create(owner=alice, title="t")
    with sql_audit.recorded() as recorder:
        list(Event.objects.filter(session=session))  # the ORM
        store.events_after(session.id)  # a Django cursor, bound in the client
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cur:  # bound on the server
            cur.execute(
                "SELECT count(*) FROM sessions_app_entry WHERE session_id = %s", [session.id]
            )
    assert len(recorder.statements) == 3
    assert all(session.id.hex in s.sql.replace("-", "") for s in recorder.statements)
    assert recorder.statements[1].where == "sessions_app.store.events_after"
