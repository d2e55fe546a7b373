"""The raw-data pages (events, entries, the path window) hold at most STRAND_API_PAGE_BYTES
of stored data, whatever `limit` asks: a page stops before the item that would pass the
budget but always holds one, and its continuation reads every item exactly once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sessions_app import selectors, services, store
from sessions_app.models import Session
from tests.api.conftest import Api, body_of, user_msg

BIG = 200_000  # characters of one message: twelve of them are more than a page's 1 MiB
COUNT = 12


def size(data: Any) -> int:
    # jsonb's text has Python's default separators; the messages are ASCII
    return len(json.dumps(data).encode())


def filled(owner: Any, count: int, chars: int) -> Session:
    session = services.session_create(owner=owner, title="filled")
    for n in range(count):
        session.refresh_from_db()
        text = f"message {n} " + "x" * chars
        store.append_events(session.id, session.last_seq, [user_msg(text)])
    session.refresh_from_db()
    return session


def whole_path(session: Session) -> list[Any]:
    assert session.leaf_entry_id is not None
    return store.path_to_root(session.id, session.leaf_entry_id)


@pytest.fixture
def big(alice: Any) -> Session:
    return filled(alice, COUNT, BIG)


def seq_pages(api: Api, sid: Any, kind: str, limit: int) -> list[list[dict]]:
    """The pages of `kind` ("events" or "entries") by seq, each read on from the last."""
    pages, after = [], -1
    while True:
        page = body_of(api.get(f"/sessions/{sid}/{kind}?limit={limit}&after_seq={after}"))
        pages.append(page[kind])
        if page["next_after_seq"] is None:
            return pages
        assert page["next_after_seq"] == page[kind][-1]["seq"]
        after = page["next_after_seq"]


def path_pages(api: Api, sid: Any, limit: int) -> list[dict]:
    """The path windows from the leaf up, as answered."""
    pages = [body_of(api.get(f"/sessions/{sid}/entries?path=1&limit={limit}"))]
    while pages[-1]["older_cursor"]:
        cursor = pages[-1]["older_cursor"]
        pages.append(body_of(api.get(f"/sessions/{sid}/entries?path=1&cursor={cursor}")))
    return pages


@pytest.mark.django_db
def test_an_events_page_stops_at_the_budget_and_reads_on(
    as_alice: Api, big: Session, settings: Any
) -> None:
    budget = settings.STRAND_API_PAGE_BYTES
    assert budget == 1024 * 1024
    pages = seq_pages(as_alice, big.id, "events", 1000)
    every = store.events_after(big.id, -1, 10_000)
    assert len(pages) > 1
    assert len(pages[0]) < len(every)
    for page in pages:
        assert page
        assert sum(size(e["data"]) for e in page) <= budget
    seqs = [e["seq"] for page in pages for e in page]
    assert seqs == [e.seq for e in every]  # every event once, in order


@pytest.mark.django_db
def test_an_entries_page_stops_at_the_budget_and_reads_on(
    as_alice: Api, big: Session, settings: Any
) -> None:
    budget = settings.STRAND_API_PAGE_BYTES
    pages = seq_pages(as_alice, big.id, "entries", 5000)
    every = store.entries_of(big.id)
    assert len(every) >= COUNT
    assert len(pages) > 1
    for page in pages:
        assert page
        assert sum(size(e["data"]) for e in page) <= budget
    assert [e["id"] for page in pages for e in page] == [e.id for e in every]


@pytest.mark.django_db
def test_a_path_window_stops_at_the_budget_and_reads_on(
    as_alice: Api, big: Session, settings: Any
) -> None:
    budget = settings.STRAND_API_PAGE_BYTES
    pages = path_pages(as_alice, big.id, 2000)
    path = whole_path(big)
    assert len(path) >= COUNT
    assert len(pages) > 1
    seen = 0
    for page in pages:
        assert page["entries"]
        assert sum(size(e["data"]) for e in page["entries"]) <= budget
        seen += len(page["entries"])
        assert page["entries_above"] == len(path) - seen
        assert (page["older_cursor"] is None) == (page["entries_above"] == 0)
    ids = [e["id"] for page in reversed(pages) for e in page["entries"]]
    assert ids == [e.id for e in path]  # the whole path once, root first


@pytest.mark.django_db
def test_an_item_larger_than_the_budget_comes_alone(
    as_alice: Api, big: Session, settings: Any
) -> None:
    settings.STRAND_API_PAGE_BYTES = 1000
    every = store.events_after(big.id, -1, 10_000)
    pages = seq_pages(as_alice, big.id, "events", 1000)
    assert [e["seq"] for page in pages for e in page] == [e.seq for e in every]
    assert all(len(page) == 1 for page in pages if size(page[0]["data"]) > 1000)
    assert all(sum(size(e["data"]) for e in page) <= 1000 for page in pages if len(page) > 1)

    entries = seq_pages(as_alice, big.id, "entries", 5000)
    assert [len(page) for page in entries] == [1] * len(store.entries_of(big.id))

    windows = path_pages(as_alice, big.id, 2000)
    path = whole_path(big)
    assert [len(w["entries"]) for w in windows] == [1] * len(path)
    assert [w["entries"][0]["id"] for w in reversed(windows)] == [e.id for e in path]


@pytest.mark.django_db
def test_small_items_fill_the_limit_under_the_budget(as_alice: Api, alice: Any) -> None:
    session = filled(alice, 30, 100)
    events = body_of(as_alice.get(f"/sessions/{session.id}/events?limit=1000"))
    assert len(events["events"]) == session.last_seq + 1
    assert events["next_after_seq"] is None
    entries = body_of(as_alice.get(f"/sessions/{session.id}/entries?limit=20"))
    assert len(entries["entries"]) == 20
    assert entries["next_after_seq"] == entries["entries"][-1]["seq"]
    window = body_of(as_alice.get(f"/sessions/{session.id}/entries?path=1&limit=25"))
    assert len(window["entries"]) == 25
    assert window["entries_above"] == 5


@pytest.mark.django_db
def test_the_pages_read_is_not_budgeted(alice: Any, settings: Any) -> None:
    """Without `max_bytes` a path window keeps its length (a deep link or the whole path);
    the budget is its callers' to ask for."""
    session = filled(alice, COUNT, BIG)
    settings.STRAND_API_PAGE_BYTES = 1000
    window = selectors.path_window(session, session.leaf_entry_id, limit=2000)
    assert len(window.entries) == len(whole_path(session))
    budgeted = selectors.path_window(session, session.leaf_entry_id, limit=2000, max_bytes=1000)
    assert len(budgeted.entries) == 1
    assert budgeted.older_end == budgeted.entries[0].parent_id
