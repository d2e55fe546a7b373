"""Trees of any shape cost output linear in their entries: the tree API, the whole-tree page
(`?tree=1`) and the HTML export.

The comb is the worst shape for a drawing that writes a text prefix per row: a spine of
messages, each with one side leaf, so every spine entry forks and the indent grows by one
per entry (a 4,000-spine comb once gave a 131 MB tree API answer). The deep chain is the
worst shape for recursion (10,000 levels; the export once failed with a RecursionError).
Sizes are asserted as bytes per entry, never times.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from sessions_app import store
from sessions_app.models import Entry, Session
from sessions_app.services import pi_io
from sessions_app.store import NewEvent
from tests.api.conftest import Api, body_of, tree_walk, user_msg
from tests.web.tree_reading import read_with_htmx

pytestmark = pytest.mark.django_db

# Marginal bytes one more comb entry may add, each a fixed part plus its short text (the
# comb's texts are under 20 characters). A per-row prefix at these depths would add
# thousands of bytes per row instead.
# - a tree API row: ~20 keys with their punctuation (~250 B), three entry ids, a timestamp,
#   the text and numbers (~200 B);
API_BYTES_PER_ENTRY = 600
# - a row of the `?tree=1` page: its <li> with classes and ids, the leaf-moving button,
#   the chip, the text and the actions link (~550 B);
PAGE_BYTES_PER_ENTRY = 800
# - the export: the entry's Pi line (~170 B) and its tree row as JSON (~110 B).
EXPORT_BYTES_PER_ENTRY = 450


def comb_file(spine: int) -> bytes:
    """A Pi file: `spine` messages in a line, each but the last with one side leaf (written
    before the next spine message, so the file's last entry, the leaf, ends the spine)."""
    lines: list[dict[str, Any]] = [
        {
            "type": "session",
            "version": 3,
            "id": f"comb-{spine}",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "cwd": "/comb",
        }
    ]
    count = 0

    def add(parent: str | None, text: str) -> str:
        nonlocal count
        entry_id = f"{count:08x}"
        seconds = count
        count += 1
        lines.append(
            {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": f"2026-01-01T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:"
                f"{seconds % 60:02d}.000Z",
                "message": {"role": "user", "content": text, "timestamp": 0},
            }
        )
        return entry_id

    spine_id = add(None, "spine 0")
    for i in range(1, spine):
        add(spine_id, f"side {i}")
        spine_id = add(spine_id, f"spine {i}")
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def imported_comb(owner: Any, spine: int) -> Session:
    source = io.BytesIO(comb_file(spine))
    return pi_io.pi_import(source=source, owner=owner, name=f"comb {spine}").session


def page_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def tree_pages(api: Api, session: Session, limit: int = 2000) -> tuple[list[dict], int]:
    """Every row of the tree API, window by window, and the bytes of all the answers."""
    rows, size = tree_walk(api, session.id, limit)
    assert len({row["id"] for row in rows}) == len(rows)  # each entry once
    return rows, size


def export_of(user: Any, session: Session) -> str:
    response = page_client(user).get(reverse("session-export-html", args=[session.id]))
    assert response.status_code == 200
    return b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]


def whole_tree_page(user: Any, session: Session) -> bytes:
    response = page_client(user).get(reverse("session", args=[session.id]) + "?tree=1")
    assert response.status_code == 200
    return response.content


def sizes(as_alice: Api, alice: Any, session: Session) -> dict[str, int]:
    rows, api_bytes = tree_pages(as_alice, session)
    assert len(rows) == Entry.objects.filter(session=session).count()
    return {
        "api": api_bytes,
        "page": len(whole_tree_page(alice, session)),
        "export": len(export_of(alice, session).encode()),
    }


def test_a_comb_costs_the_same_bytes_per_entry_at_any_size(as_alice: Api, alice: Any) -> None:
    small = imported_comb(alice, 500)
    large = imported_comb(alice, 4000)
    entries = {s.id: Entry.objects.filter(session=s).count() for s in (small, large)}
    assert entries[large.id] == 7999

    at_small, at_large = sizes(as_alice, alice, small), sizes(as_alice, alice, large)

    added = entries[large.id] - entries[small.id]
    limits = {
        "api": API_BYTES_PER_ENTRY,
        "page": PAGE_BYTES_PER_ENTRY,
        "export": EXPORT_BYTES_PER_ENTRY,
    }
    for door, limit in limits.items():
        per_entry = (at_large[door] - at_small[door]) / added
        assert per_entry < limit, (door, per_entry)
        assert at_large[door] < 16 * 1024 * 1024, door


def test_the_comb_is_drawn_with_depths_not_prefixes(as_alice: Api, alice: Any) -> None:
    session = imported_comb(alice, 300)

    rows, _ = tree_pages(as_alice, session)
    html = whole_tree_page(alice, session).decode()

    # The spine's last entry is 299 forks deep in Pi's layout; its row says so as a number.
    assert max(row["indent"] for row in rows) >= 299
    assert max(row["depth"] for row in rows) == 299
    assert "prefix" not in rows[0] and "│" not in json.dumps(rows)
    deepest = max(rows, key=lambda row: row["indent"])
    match = re.search(rf'<li class="node (d\d+) [^"]*" id="node-{deepest["id"]}"', html)
    assert match is not None and match.group(1) == "d24"  # CSS draws at most 24 levels
    assert f">{deepest['indent']:,}</span>" in html  # deeper ones write their level
    assert "│" not in html and 'class="prefix"' not in html


def chain(owner: Any, length: int) -> Session:
    """`length` messages, each the child of the one before, with a compaction every 500
    (each keeping the last few), so compaction cards would nest 20 deep."""
    from sessions_app import services

    session = services.session_create(owner=owner, title=f"chain {length}")
    seq = session.last_seq
    written = 0
    while written < length:
        batch: list[NewEvent] = [
            user_msg(f"m{written + i}") for i in range(min(500, length - written))
        ]
        seq = store.append_events(session.id, seq, batch).last_seq
        written += len(batch)
        session.refresh_from_db()
        path = store.path_to_root(session.id, session.leaf_entry_id or "", min_depth=written - 3)
        compaction = {
            "type": "compaction",
            "summary": f"up to m{written}",
            "firstKeptEntryId": path[0].id,
            "tokensBefore": 1000,
        }
        seq = store.append_events(
            session.id, seq, [NewEvent("entry/compaction", {"entry": compaction})]
        ).last_seq
        written += 1
    session.refresh_from_db()
    return session


def test_a_ten_thousand_deep_chain_is_paged_drawn_and_exported(as_alice: Api, alice: Any) -> None:
    session = chain(alice, 10_000)
    count = Entry.objects.filter(session=session).count()
    assert count > 10_000

    rows, _ = tree_pages(as_alice, session)
    assert len(rows) == count and max(row["depth"] for row in rows) == count - 1

    client = page_client(alice)
    for query in ("", "?tree=1", "?view=trace", "?view=context"):
        response = client.get(reverse("session", args=[session.id]) + query)
        assert response.status_code == 200, query
    # The whole tree: a first window of a few hundred rows, then the path above and the
    # runs of its long line read on, each a bounded answer, every entry once.
    whole = read_with_htmx(client, session)
    assert len(whole.ids) == len(set(whole.ids)) == count
    assert whole.largest < 500 * 1024 and {"previous", "run"} <= whole.kinds

    html = export_of(alice, session)
    data = re.search(r'id="tree-data">([^<]*)</script>', html)
    assert data is not None and len(json.loads(data.group(1))["rows"]) == count
    lines = re.search(r'id="pi-jsonl">([^<]*)</script>', html)
    assert lines is not None and len(lines.group(1).splitlines()) == count + 1  # + header


def test_tree_cursor_visits_every_node_once_while_the_session_moves(
    as_alice: Api, alice: Any
) -> None:
    session = imported_comb(alice, 300)
    before = set(Entry.objects.filter(session=session).values_list("entry_id", flat=True))
    path = f"/sessions/{session.id}/tree"

    first = body_of(as_alice.get(path + "?limit=97"))
    # Meanwhile the session grows and its leaf moves to the other side of every fork.
    root = store.entries_of(session.id)[0].id
    store.append_events(
        session.id,
        session.last_seq,
        [NewEvent("leaf/moved", {"to": root, "reason": "navigate"}), user_msg("a new branch")],
    )
    rows = list(first["nodes"])
    for key in ("previous_cursor", "next_cursor"):
        cursor = first[key]
        while cursor:
            page = body_of(as_alice.get(path + f"?limit=97&cursor={cursor}"))
            rows = page["nodes"] + rows if key == "previous_cursor" else rows + page["nodes"]
            cursor = page[key]

    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids)) == len(before)
    assert set(ids) == before
    assert [row["row"] for row in rows] == list(range(len(before)))
    # A new first page shows the tree as it is now.
    now = body_of(as_alice.get(path + "?limit=2000"))
    assert now["node_count"] == len(before) + 1
