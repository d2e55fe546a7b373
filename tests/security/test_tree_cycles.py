"""Trees cannot loop: a parent cycle is refused at every door that writes one, and a walk up
a tree ends even over a cycle stored before they were refused.

Through daphne, as an attacker would: Alice (through the API) tries every way to make an
entry hang below itself, and each answer is a clean 4xx within the client's timeout with
nothing written; a comparison over a stored cycle answers at once while Bob is served.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import requests
from django.db import connection
from django.test import Client

from sessions_app import services, store
from sessions_app.models import Entry, Session
from sessions_app.services import pi_io
from sessions_app.store import NewEvent
from tests.security.served import TIMEOUT_S, client, meanwhile, served

pytestmark = pytest.mark.django_db(transaction=True)


def message(entry_id: str, parent: str | None, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "message", "id": entry_id, "parentId": parent}
    entry["message"] = {"role": "user", "content": f"I am {entry_id}"}
    return {"type": "user/message", "data": {"entry": entry, **extra}}


def pi_file(*entries: tuple[str, str | None]) -> bytes:
    header = {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"}
    lines = [header] + [
        {
            "type": "message",
            "id": entry_id,
            "parentId": parent,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": entry_id},
        }
        for entry_id, parent in entries
    ]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def stored(session: Session) -> tuple[int, list[str]]:
    session.refresh_from_db()
    return session.last_seq, sorted(
        Entry.objects.filter(session=session).values_list("entry_id", flat=True)
    )


def test_no_append_through_the_api_can_make_an_entry_its_own_parent(alice, bob):
    session = services.session_create(owner=alice, title="loops")
    before = stored(session)
    attacks = [
        # the attack: an orphan naming itself
        ([message("x", "x", orphan=True)], "not_allowed", "orphan"),
        # the same without the flag: the parent does not exist (yet)
        ([message("x", "x")], "invalid_event", "not an entry of this session"),
        # an orphan naming a later entry of its batch, which names it back
        ([message("x", "z", orphan=True), message("z", "x")], "not_allowed", "orphan"),
        # a parent that comes later in the same batch
        ([message("x", "z"), message("z", None)], "invalid_event", "not an entry"),
    ]
    url_events = f"/api/sessions/{session.id}/events"
    with served() as url:
        alice_http, bob_http = client(alice), client(bob)
        with meanwhile(
            lambda: bob_http.get(f"{url}/api/sessions", timeout=TIMEOUT_S).status_code
        ) as bobs:
            for events, code, words in attacks:
                answer = alice_http.post(
                    url + url_events,
                    json={"expected_seq": session.last_seq, "events": events},
                    timeout=TIMEOUT_S,
                )
                assert answer.status_code == 422, answer.text
                assert answer.json()["error"] == code and words in answer.json()["detail"]
                assert stored(session) == before
            root = alice_http.post(
                url + url_events,
                json={"expected_seq": session.last_seq, "events": [message("y", None)]},
                timeout=TIMEOUT_S,
            )
            assert root.status_code == 201, root.text
            compared = alice_http.get(
                f"{url}/api/sessions/{session.id}/compare",
                params={"a": "x", "b": "y"},
                timeout=TIMEOUT_S,
            )
        assert compared.status_code == 404 and "'x'" in compared.json()["detail"]
    assert bobs and set(bobs) == {200}
    assert stored(session)[1] == ["y"]


def test_a_pi_file_with_a_cycle_is_refused_at_the_line_that_closes_it(alice, bob):
    # a → b → c → a, written c's parent last: line 5 (after the header and the root) closes it
    content = pi_file(("r", None), ("a", "c"), ("b", "a"), ("c", "b"), ("d", "r"))
    selfish = pi_file(("r", None), ("s", "s"))
    with served() as url:
        alice_http, bob_http = client(alice), client(bob)
        with meanwhile(
            lambda: bob_http.get(f"{url}/api/sessions", timeout=TIMEOUT_S).status_code
        ) as bobs:
            answers = [
                alice_http.post(
                    f"{url}/api/sessions/import",
                    files={"file": ("loop.jsonl", body, "application/x-ndjson")},
                    timeout=TIMEOUT_S,
                )
                for body in (content, selfish)
            ]
    for answer, line, words in zip(
        answers, (5, 3), ("'c' closes a parent cycle", "'s' names itself"), strict=True
    ):
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == "invalid_pi_file"
        assert answer.json()["detail"].startswith(f"line {line}: entry {words}"), answer.text
    assert set(bobs) == {200}
    assert not Session.objects.filter(owner=alice).exists()


def test_an_entry_cannot_take_the_id_an_imported_orphan_names(alice):
    # The orphan `o` names `zz`, which the file lacks: an entry `zz` below `o` would close
    # a cycle o → zz → o.
    imported = pi_io.pi_import(source=io.BytesIO(pi_file(("r", None), ("o", "zz"))), owner=alice)
    session = imported.session
    before = stored(session)
    with served() as url:
        answer = client(alice).post(
            f"{url}/api/sessions/{session.id}/events",
            json={"expected_seq": session.last_seq, "events": [message("zz", "o")]},
            timeout=TIMEOUT_S,
        )
    assert answer.status_code == 422, answer.text
    assert "would close a parent cycle" in answer.json()["detail"]
    assert stored(session) == before


def _store_legacy_cycle(session: Session) -> None:
    """Two entries on a parent cycle, written as a database from before version 3 of
    `strand_append` could hold them (an API orphan `x` naming `z`, then `z` below `x`)."""
    seq = session.last_seq
    with connection.cursor() as cur:
        for entry_id, parent, depth in (("x", "z", 0), ("z", "x", 1)):
            seq += 1
            cur.execute(
                "INSERT INTO sessions_app_entry (session_id, entry_id, parent_id, type, data, "
                "timestamp, seq, depth) VALUES (%s, %s, %s, 'message', %s, '', %s, %s)",
                [
                    str(session.id),
                    entry_id,
                    parent,
                    json.dumps(message(entry_id, parent)["data"]["entry"]),
                    seq,
                    depth,
                ],
            )
        cur.execute(
            "UPDATE sessions_app_session SET last_seq = %s WHERE id = %s", [seq, str(session.id)]
        )


def test_comparing_over_a_stored_cycle_answers_while_another_user_is_served(alice, bob):
    session = services.session_create(owner=alice, title="legacy loop")
    store.append_events(session.id, 0, [NewEvent(**message("y", None))])
    session.refresh_from_db()
    _store_legacy_cycle(session)
    with served() as url:
        alice_http, bob_http = client(alice), client(bob)
        with meanwhile(
            lambda: bob_http.get(f"{url}/api/sessions", timeout=TIMEOUT_S).status_code
        ) as bobs:
            answers = {
                (a, b): alice_http.get(
                    f"{url}/api/sessions/{session.id}/compare",
                    params={"a": a, "b": b},
                    timeout=TIMEOUT_S,
                )
                for a, b in (("x", "y"), ("z", "y"), ("x", "z"), ("z", "z"))
            }
    for pair, answer in answers.items():
        assert answer.status_code == 200, (pair, answer.text)
    # z climbs to x (depth 0, a root), never back to z; x is a root of its own.
    assert answers[("z", "y")].json()["ancestor"] is None
    assert answers[("x", "z")].json()["ancestor"]["entry_id"] == "x"
    assert set(bobs) == {200}
    # The compare page reads the same selector.
    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/sessions/{session.id}/compare", {"a": "z", "b": "y"})
    assert page.status_code == 200


def test_the_store_refuses_an_orphan_whose_parent_is_an_entry(alice):
    session = services.session_create(owner=alice, title="orphans")
    store.append_events(session.id, 0, [NewEvent(**message("r", None))])
    for events in (
        [message("o", "r", orphan=True)],  # a stored entry
        [message("o", "o", orphan=True)],  # itself
        [message("o", "p", orphan=True), message("p", None)],  # a later entry of its batch
    ):
        with pytest.raises(store.InvalidEvent, match="would close a parent cycle"):
            store.append_events(session.id, 1, [NewEvent(**e) for e in events])
    assert stored(session) == (1, ["r"])


def test_requests_time_out_rather_than_hang(alice):
    # The client-side guard itself: a server that never answers fails the test, not the run.
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get("http://127.0.0.1:9/", timeout=1)
