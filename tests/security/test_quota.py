"""A per-user storage quota (`STRAND_USER_QUOTA_BYTES`): bytes of JSON in a user's events
and entries, counted by the append path on the owner's row in the same transaction.

Through daphne with a small quota: Alice fills hers, and the append that would pass it is
refused whole with a 413 that names the quota, while Bob, with a quota of his own, is
served and appends meanwhile; writers racing in several of her sessions at once never take
her past it; deleting a session gives its bytes back. The pages and the import say so too,
and a turn the quota stops ends well-formed.
"""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from sessions_app import services, store
from sessions_app.models import Entry, Session, StorageUsage
from sessions_app.selectors.verify import verify_session
from sessions_app.store import NewEvent
from tests.api.conftest import OFFLINE_PRESET, token_api, wait_idle
from tests.security.served import TIMEOUT_S, client, meanwhile, served

QUOTA = 40_000


def message(text: str) -> dict[str, Any]:
    entry = {"type": "message", "message": {"role": "user", "content": text}}
    return {"type": "user/message", "data": {"entry": entry}}


def usage(user: Any) -> int:
    found = StorageUsage.objects.filter(owner=user).first()
    return found.stored_bytes if found else 0


def sessions_bytes(user: Any) -> int:
    return sum(Session.objects.filter(owner=user).values_list("stored_bytes", flat=True))


def stored(session: Session) -> tuple[int, int]:
    session.refresh_from_db()
    return session.last_seq, Entry.objects.filter(session=session).count()


@pytest.mark.django_db(transaction=True)
def test_an_append_past_the_quota_is_refused_whole_with_413_while_bob_appends(alice, bob):
    session = services.session_create(owner=alice, title="filling up")
    bobs_session = services.session_create(owner=bob, title="Bob's")
    with served(STRAND_USER_QUOTA_BYTES=str(QUOTA)) as url:
        alice_http, bob_http = client(alice), client(bob)
        bob_seq = [bobs_session.last_seq]

        def bob_appends() -> int:
            answer = bob_http.post(
                f"{url}/api/sessions/{bobs_session.id}/events",
                json={"expected_seq": bob_seq[0], "events": [message("Bob's own")]},
                timeout=TIMEOUT_S,
            )
            if answer.status_code == 201:
                bob_seq[0] = answer.json()["last_seq"]
            return answer.status_code

        with meanwhile(bob_appends) as bobs:
            seq, refused = session.last_seq, None
            for _ in range(100):
                # Two messages of ~1.5 KB a batch: the batch that would pass goes whole or not.
                answer = alice_http.post(
                    f"{url}/api/sessions/{session.id}/events",
                    json={"expected_seq": seq, "events": [message("x" * 1500)] * 2},
                    timeout=TIMEOUT_S,
                )
                if answer.status_code != 201:
                    refused = answer
                    break
                seq = answer.json()["last_seq"]
            assert refused is not None, "the quota was never reached"
            before = stored(session)
            # Once full, even a small write is refused; nothing of it is written.
            small = alice_http.post(
                f"{url}/api/sessions/{session.id}/events",
                json={"expected_seq": seq, "events": [message("hi")] * 20},
                timeout=TIMEOUT_S,
            )
    for answer in (refused, small):
        assert answer.status_code == 413, answer.text
        body = answer.json()
        assert body["error"] == "quota_exceeded" and body["quota"] == "STRAND_USER_QUOTA_BYTES"
        assert body["quota_bytes"] == QUOTA and "STRAND_USER_QUOTA_BYTES" in body["detail"]
        assert body["used_bytes"] <= QUOTA
    assert stored(session) == before == (seq, seq)  # every seq after session/created: an entry
    assert usage(alice) <= QUOTA and usage(alice) == sessions_bytes(alice)
    assert bobs and set(bobs) == {201}
    assert usage(bob) == sessions_bytes(bob) > 0


@pytest.mark.django_db(transaction=True)
def test_writers_racing_in_several_sessions_never_pass_the_quota(alice):
    sessions = [services.session_create(owner=alice, title=f"racer {n}") for n in range(4)]
    statuses: list[int] = []
    with served(STRAND_USER_QUOTA_BYTES=str(QUOTA)) as url:
        http = client(alice)

        def writer(session: Session) -> None:
            seq = session.last_seq
            while True:
                answer = http.post(
                    f"{url}/api/sessions/{session.id}/events",
                    json={"expected_seq": seq, "events": [message("y" * 1000)]},
                    timeout=TIMEOUT_S,
                )
                statuses.append(answer.status_code)
                if answer.status_code != 201:
                    return
                seq = answer.json()["last_seq"]

        threads = [threading.Thread(target=writer, args=(s,)) for s in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT_S * 10)
    assert set(statuses) == {201, 413} and statuses.count(413) == len(sessions)
    assert QUOTA - 3_000 < usage(alice) <= QUOTA  # full, to within one message of it
    assert usage(alice) == sessions_bytes(alice)


@pytest.mark.django_db
def test_deleting_a_session_gives_its_bytes_back(alice, settings):
    first = services.session_create(owner=alice, title="first")
    store.append_events(first.id, 0, [NewEvent(**message("z" * 5000))])
    second = services.session_create(owner=alice, title="second")
    first.refresh_from_db()
    assert usage(alice) == sessions_bytes(alice) > first.stored_bytes > 10_000
    settings.STRAND_USER_QUOTA_BYTES = usage(alice) + 100
    with pytest.raises(store.QuotaExceeded):
        store.append_events(second.id, 0, [NewEvent(**message("z" * 5000))])
    services.session_delete(session=first, by=alice)
    assert usage(alice) == sessions_bytes(alice) == Session.objects.get(id=second.id).stored_bytes
    store.append_events(second.id, 0, [NewEvent(**message("z" * 5000))])
    services.session_delete(session=Session.objects.get(id=second.id), by=alice)
    assert usage(alice) == 0


@pytest.mark.django_db
def test_the_bytes_counted_are_those_of_the_stored_json(alice):
    session = services.session_create(owner=alice, title="measured")
    store.append_events(session.id, 0, [NewEvent(**message(f"m{n} " * 200)) for n in range(5)])
    session.refresh_from_db()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT (SELECT sum(octet_length(data::text)) FROM sessions_app_event "
            "WHERE session_id = %(s)s) + (SELECT sum(octet_length(data::text)) "
            "FROM sessions_app_entry WHERE session_id = %(s)s)",
            {"s": str(session.id)},
        )
        (printed,) = cur.fetchone()
    # Postgres prints JSON with a space after each ':' and ',', compact JSON has none: the
    # count is the compact one, a little below the printed one.
    assert 0.9 * printed < session.stored_bytes <= printed


@pytest.mark.django_db
def test_the_pages_say_the_quota_is_full(alice, settings):
    settings.STRAND_USER_QUOTA_BYTES = 3_000
    session = services.session_create(owner=alice, title="full")
    browser = Client()
    browser.force_login(alice)
    store.append_events(session.id, 0, [NewEvent(**message("w" * 1000))])
    before = stored(session)
    page = browser.post(
        f"/sessions/{session.id}/rename", {"title": "w" * 400 + " but longer"}, follow=True
    )
    assert page.status_code == 200 and b"storage quota exceeded" in page.content
    line = json.dumps({"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"})
    entry: dict[str, Any] = {"type": "message", "id": "a", "parentId": None, "timestamp": "t"}
    entry["message"] = {"role": "user", "content": "v" * 3000}
    upload = io.BytesIO(f"{line}\n{json.dumps(entry)}\n".encode())
    upload.name = "big.jsonl"
    imported = browser.post("/sessions/import", {"file": upload}, follow=True)
    assert b"Could not import big.jsonl: storage quota exceeded" in imported.content
    assert stored(session) == before
    assert Session.objects.filter(owner=alice).count() == 1
    api = token_api(alice)
    upload.seek(0)
    answer = api.client.post("/api/sessions/import", {"file": upload})
    assert answer.status_code == 413 and json.loads(answer.content)["error"] == "quota_exceeded"


@pytest.mark.django_db(transaction=True)
def test_a_turn_the_quota_stops_ends_well_formed(alice, settings, workspace: Path):
    session = services.session_create(
        owner=alice, title="turn", cwd=str(workspace), preset=OFFLINE_PRESET
    )
    api = token_api(alice)
    # Room for the turn's start and little more: a later write of the turn (its request
    # header, its reply) would pass the quota.
    settings.STRAND_USER_QUOTA_BYTES = usage(alice) + 2_500
    sent = api.post(f"/sessions/{session.id}/messages", {"text": "list files"})
    assert sent.status_code == 202, sent.content
    wait_idle(session)
    events = store.events_after(session.id, -1, 1000)
    [end] = [e for e in events if e.type == "turn/end"]
    assert end.data["reason"] == "error" and "quota" in end.data["error"]
    assert [e.type for e in events if e.type.startswith("turn/")] == ["turn/start", "turn/end"]
    session.refresh_from_db()
    assert verify_session(session) is None
    assert usage(alice) == sessions_bytes(alice)
    # Once full, the next message is refused at once, and nothing is written.
    settings.STRAND_USER_QUOTA_BYTES = usage(alice)
    before = stored(session)
    again = api.post(f"/sessions/{session.id}/messages", {"text": "list files"})
    assert again.status_code == 413, again.content
    assert json.loads(again.content)["error"] == "quota_exceeded"
    assert stored(session) == before
