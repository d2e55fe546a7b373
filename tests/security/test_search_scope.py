"""Search reads the viewer's sessions only.

The message subquery of the home page's search ran `to_tsvector` over every entry of every
session and applied the viewer's filter outside it: Alice, with 6 entries, waited 6 s at
520,000 entries of other people's. Timing is not asserted here (`bench/search.py` measures
it); what is asserted is that the text of other people's entries is never matched at all: an
entry of Bob's that `to_tsvector` refuses (more than 1 MB of words) made everyone's search
fail, and now fails only Bob's own.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from sessions_app import services, store
from sessions_app.models import Session
from tests.api.conftest import user_msg

pytestmark = pytest.mark.django_db

# 100,000 distinct words: a text Postgres stores but whose tsvector is over its 1 MB limit.
UNSEARCHABLE = " ".join(f"x{n}" for n in range(100_000, 200_000))


def session_with(owner: Any, title: str, *texts: str) -> Session:
    session = services.session_create(owner=owner, title=title, cwd="")
    store.append_events(session.id, session.last_seq, [user_msg(t) for t in texts])
    return session


def titles_found(user: Any, q: str) -> set[str]:
    client = Client()
    client.force_login(user)
    response = client.get("/", {"q": q})
    assert response.status_code == 200, response.content[:300]
    return {row.session.title for row in response.context["rows"]}


@pytest.fixture
def sessions(settings: Any, alice: Any, bob: Any) -> None:
    settings.STRAND_MAX_EVENT_BYTES = 4 * 1024 * 1024
    session_with(alice, "Alice's notes", "the walrus migration plan")
    session_with(bob, "Bob's notes", "a walrus sighting")
    session_with(bob, "Bob's dump", UNSEARCHABLE)


def test_a_search_finds_the_viewers_own_sessions_only(sessions: None, alice: Any) -> None:
    assert titles_found(alice, "walrus") == {"Alice's notes"}


def test_another_users_entries_cannot_break_a_search(sessions: None, alice: Any) -> None:
    # Bob's dump would fail to_tsvector; Alice's search never reads it.
    assert titles_found(alice, "migration") == {"Alice's notes"}
    assert titles_found(alice, "x150000") == set()


def test_staff_search_every_session(alice: Any, bob: Any, carol: Any) -> None:
    session_with(alice, "Alice's notes", "the walrus migration plan")
    session_with(bob, "Bob's notes", "a walrus sighting")
    assert titles_found(carol, "walrus") == {"Alice's notes", "Bob's notes"}
    assert titles_found(bob, "walrus") == {"Bob's notes"}
