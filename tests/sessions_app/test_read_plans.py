"""The reads of one session cost what they return, before and after any ANALYZE.

Each test grows a session after the planner's statistics were gathered without it (the
state of a session that grew a moment ago), runs a read as the pages do, and then asks
Postgres how many rows of the event and entry tables that same statement touched
(`EXPLAIN ANALYZE`): a window of the path must read the window, not the session.

The tests commit (`transaction=True`) and start from emptied tables: the pages that
rolled-back tests leave behind would skew the planner's rows per page, which ANALYZE
records outside any transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app import selectors, services, store
from sessions_app.models import Session
from sessions_app.selectors.tree import tree_path_window
from sessions_app.store import NewEvent

TABLES = ("sessions_app_entry", "sessions_app_event")
TURNS = 400  # 5 events and 3 entries a turn: 2,000 events, a path of 1,201 entries


def _turn(turn: int) -> list[NewEvent]:
    def message(kind: str, role: str, text: str) -> NewEvent:
        content = [{"type": "text", "text": text}] if role == "assistant" else text
        entry = {"type": "message", "message": {"role": role, "content": content}}
        return NewEvent(kind, {"entry": entry}, turn=turn)

    return [
        NewEvent("turn/start", {"turn": turn}),
        message("user/message", "user", f"question {turn}"),
        message("assistant/message", "assistant", f"answer {turn}"),
        message("user/message", "user", f"thanks {turn}"),
        NewEvent("turn/end", {"turn": turn, "reason": "completed"}),
    ]


@pytest.fixture
def grown(alice: Any) -> Session:
    """A session grown by 2,000 events after an ANALYZE that saw only a smaller one (of
    300 events: a few pages, so that the planner's rows per page are those of a real
    table); a compaction before its last 50 turns keeps them and 10 turns before it."""
    with connection.cursor() as cur:
        cur.execute(f"TRUNCATE {', '.join(TABLES)}")
    small = services.session_create(owner=alice, title="small")
    store.append_events(small.id, 0, [e for turn in range(1, 61) for e in _turn(turn)])
    with connection.cursor() as cur:
        for table in TABLES:
            cur.execute(f"ANALYZE {table}")
    session = services.session_create(owner=alice, title="grown")
    seq = session.last_seq
    kept = ""
    for first in range(1, TURNS + 1, 10):
        if first == TURNS - 49:
            entry = {"type": "compaction", "summary": "s", "firstKeptEntryId": kept}
            compaction = NewEvent("entry/compaction", {"entry": entry})
            seq = store.append_events(session.id, seq, [compaction]).last_seq
        batch = [e for turn in range(first, first + 10) for e in _turn(turn)]
        written = store.append_events(session.id, seq, batch)
        seq, kept = written.last_seq, written.entry_ids[0]
    session.refresh_from_db()
    return session


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's scans of the event and entry tables produced or filtered out, and
    index entries its bitmap scans collected (a bitmap scan counts a row twice: the
    bounds below allow for that)."""
    node_rows = 0
    if plan.get("Relation Name") in TABLES or plan.get("Node Type") == "Bitmap Index Scan":
        per_loop = plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
        node_rows = per_loop * plan.get("Actual Loops", 1)
    return node_rows + sum(_rows_read(child) for child in plan.get("Plans", ()))


def _at_most(rows: int) -> int:
    """What a read of `rows` rows may count: each through an index and the table."""
    return 2 * rows


def _reads(call: Callable[[], object]) -> Iterator[int]:
    """Rows read by each statement `call` runs, measured by running it again."""
    with CaptureQueriesContext(connection) as captured:
        call()
    for query in captured.captured_queries:
        with connection.cursor() as cur:
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query["sql"])
            (plan,) = cur.fetchone()[0]
        yield _rows_read(plan["Plan"])


@pytest.mark.django_db(transaction=True)
def test_no_statistics_are_gathered_on_session_ids(grown: Session) -> None:
    with connection.cursor() as cur:
        for table in TABLES:
            cur.execute(f"ANALYZE {table}")
        cur.execute(
            "SELECT tablename FROM pg_stats WHERE attname = 'session_id' AND tablename = ANY(%s)",
            [list(TABLES)],
        )
        assert cur.fetchall() == []


@pytest.mark.django_db(transaction=True)
def test_a_window_of_a_fresh_sessions_path_reads_the_window(grown: Session) -> None:
    leaf = grown.leaf_entry_id
    assert leaf is not None
    depth = store.depth_of(grown.id, leaf)
    assert depth == 3 * TURNS
    window = lambda: store.path_to_root(grown.id, leaf, min_depth=depth - 49)  # noqa: E731
    assert len(window()) == 50
    # The walk reads each entry of the window twice (its step and its row); the old plan
    # hashed all 1,200 entries of the path, or filtered them at every step.
    assert max(_reads(window)) <= _at_most(2 * 50 + 1)


@pytest.mark.django_db(transaction=True)
def test_events_of_a_few_turns_read_only_those_turns(grown: Session) -> None:
    events = lambda: store.events_of_turns(grown.id, [TURNS - 1, TURNS])  # noqa: E731
    assert len(events()) == 10
    assert max(_reads(events)) <= _at_most(10)


@pytest.mark.django_db(transaction=True)
def test_the_context_of_the_leaf_reads_its_kept_window(grown: Session) -> None:
    context = lambda: selectors.session_context(grown)  # noqa: E731
    kept = 1 + 3 * 60  # the summary, then the 60 turns from the first kept entry
    assert len(context().messages) == kept
    assert sum(_reads(context)) <= _at_most(2 * kept + 10)


@pytest.mark.django_db(transaction=True)
def test_the_session_turns_read_no_other_events(grown: Session) -> None:
    turns = lambda: selectors.turn_numbers(grown)  # noqa: E731
    assert len(turns()) == TURNS
    assert max(_reads(turns)) <= _at_most(TURNS)


@pytest.mark.django_db(transaction=True)
def test_the_tree_near_the_leaf_reads_the_window_and_its_branches(grown: Session) -> None:
    leaf = grown.leaf_entry_id
    window = lambda: tree_path_window(  # noqa: E731
        grown, as_of_seq=grown.last_seq, leaf=leaf, end=leaf, below=None, rows=100
    )
    assert len(window().rows) == 50  # the path's last 50 entries; no branch leaves them
    # The walk reads the 50 entries twice, the children lookups find the path's own.
    assert sum(_reads(window)) <= _at_most(3 * 50 + 5)


@pytest.mark.django_db(transaction=True)
def test_a_page_of_the_log_reads_the_page(grown: Session) -> None:
    page = lambda: store.events_after(grown.id, -1, 100)  # noqa: E731
    assert [e.seq for e in page()] == list(range(100))
    assert max(_reads(page)) <= _at_most(100)


@pytest.mark.django_db(transaction=True)
def test_a_page_of_entries_reads_about_the_page(grown: Session) -> None:
    page = lambda: selectors.entry_page(grown, after_seq=-1, limit=100)  # noqa: E731
    found = page()
    assert len(found.entries) == 100 and found.more
    # Ranges of 202 seqs: the first holds 121 entries, enough for the page and the next.
    assert sum(_reads(page)) <= _at_most(2 * (100 + 1))
