"""A script that loops over a small write door gets a handful through, then 429s.

Through daphne with the default limits: Alice fires 150 renames, then 300 leaf moves, as
fast as the server answers (before the limits, 150 renames went through in 5.4 s, each an
event sent to every viewer of the session). Each door lets through at most its limit per
window, refuses the rest with 429 and `Retry-After`, writes one event per accepted request
and none for a refused one, and Bob, who is counted on his own, is served meanwhile.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests

from deploy import daphne
from sessions_app import services, store
from sessions_app.models import Event, Session
from sessions_app.services import ratelimit, tokens
from tests.api.conftest import user_msg
from tests.runtime.conftest import child_database_url

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server() -> Any:
    port = daphne.free_port()
    process = daphne.start(port, {"DATABASE_URL": child_database_url(), "STRAND_RATE_LIMITS": "{}"})
    yield f"http://127.0.0.1:{port}"
    daphne.stop(process)


def client_of(user: Any) -> requests.Session:
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {tokens.token_create(user, 'flood')[1]}"
    return http


def flood(send: Any, times: int, meanwhile: Any) -> list[requests.Response]:
    """`send(n)` `times` times, and `meanwhile()` (another user's request) halfway."""
    answers = []
    for n in range(times):
        answers.append(send(n))
        if n == times // 2:
            meanwhile()
    return answers


def assert_bounded(answers: list[requests.Response], scope: str) -> int:
    """At most the scope's limit in each window: the run may straddle one window's end, so
    at most twice the limit in all. Every other answer is a 429 with Retry-After. The
    number accepted."""
    limit, _window = ratelimit.DEFAULT_LIMITS[scope]
    statuses = [a.status_code for a in answers]
    accepted = statuses.count(200)
    assert limit <= accepted <= 2 * limit, statuses
    assert set(statuses) == {200, 429}, statuses
    refused = [a for a in answers if a.status_code == 429]
    assert all(int(a.headers["Retry-After"]) > 0 for a in refused)
    assert all(a.json()["error"] == "rate_limited" for a in refused)
    return accepted


def test_a_rename_flood_is_cut_at_the_limit(server: str, alice: Any, bob: Any) -> None:
    session = services.session_create(owner=alice, title="target")
    bobs = services.session_create(owner=bob, title="Bob's")
    alice_http, bob_http = client_of(alice), client_of(bob)

    def bob_renames() -> None:
        # Bob has limits of his own.
        url = f"{server}/api/sessions/{bobs.id}"
        renamed = bob_http.patch(url, json={"title": "mine"}, timeout=30)
        assert renamed.status_code == 200, renamed.text

    started = time.monotonic()
    answers = flood(
        lambda n: alice_http.patch(
            f"{server}/api/sessions/{session.id}", json={"title": f"spam {n}"}, timeout=30
        ),
        150,
        bob_renames,
    )
    print(f"150 renames answered in {time.monotonic() - started:.2f} s")
    accepted = assert_bounded(answers, "rename")
    assert Event.objects.filter(session=session, type="session/renamed").count() == accepted
    last_accepted = max(n for n, a in enumerate(answers) if a.status_code == 200)
    assert Session.objects.get(id=session.id).title == f"spam {last_accepted}"
    assert Session.objects.get(id=bobs.id).title == "mine"


def test_a_leaf_move_flood_is_cut_at_the_limit(server: str, alice: Any, bob: Any) -> None:
    session = services.session_create(owner=alice, title="a tree")
    a, b = store.append_events(session.id, 0, [user_msg("a"), user_msg("b")]).entry_ids
    bobs = services.session_create(owner=bob, title="Bob's")
    bob_a = store.append_events(bobs.id, 0, [user_msg("a"), user_msg("b")]).entry_ids[0]
    alice_http, bob_http = client_of(alice), client_of(bob)

    def bob_moves() -> None:
        url = f"{server}/api/sessions/{bobs.id}/leaf"
        moved = bob_http.put(url, json={"entry_id": bob_a}, timeout=30)
        assert moved.status_code == 200, moved.text

    answers = flood(
        lambda n: alice_http.put(
            f"{server}/api/sessions/{session.id}/leaf",
            json={"entry_id": a if n % 2 == 0 else b},  # from b, the leaf, to a and back
            timeout=30,
        ),
        300,
        bob_moves,
    )
    accepted = assert_bounded(answers, "navigate")
    assert Event.objects.filter(session=session, type="leaf/moved").count() == accepted
    assert Session.objects.get(id=bobs.id).leaf_entry_id == bob_a
