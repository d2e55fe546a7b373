"""The whole tree, a window at a time: the page's first window and the links that read on
(with htmx and without JavaScript), the tree API's cursors, for the worst shapes (a deep
chain, a wide fan, many roots, a comb); who may read them; the tree's server search.

Windows are made small (TREE_ROWS, TREE_FULL_LIMIT) so that small files have the shapes
of large ones: every entry must be reached exactly once, each answer bounded by a window.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from bench.trees import branchy_file
from sessions_app import services
from sessions_app.models import Entry, Session
from sessions_app.selectors import tree as tree_selectors
from sessions_app.selectors.cursors import cursor_encode
from sessions_app.services import pi_io
from tests.api.conftest import Api, body_of, tree_walk
from tests.web.conftest import client_for
from tests.web.tree_reading import items, read_with_htmx, read_without_javascript, tree_of

pytestmark = pytest.mark.django_db

ROWS = 40
FULL = 60


@pytest.fixture
def small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows of 40 rows; a session of more than 60 entries is drawn near its branch."""
    monkeypatch.setattr(tree_selectors, "TREE_ROWS", ROWS)
    monkeypatch.setattr(tree_selectors, "TREE_FULL_LIMIT", FULL)


def pi_file(entries: list[tuple[str, str | None]]) -> bytes:
    """A Pi file of user messages, (id, parent id) each, one second apart in file order."""
    lines = [
        json.dumps(
            {"type": "session", "version": 3, "id": "shape", "timestamp": "2026-01-01T00:00:00Z"}
        )
    ]
    for n, (entry_id, parent) in enumerate(entries):
        lines.append(
            json.dumps(
                {
                    "type": "message",
                    "id": entry_id,
                    "parentId": parent,
                    "timestamp": f"2026-01-01T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z",
                    "message": {"role": "user", "content": f"entry {entry_id}", "timestamp": 0},
                }
            )
        )
    return ("\n".join(lines) + "\n").encode()


def imported(owner: User, data: bytes, name: str) -> Session:
    return pi_io.pi_import(source=io.BytesIO(data), owner=owner, name=name).session


def ids(n: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{i:07x}" for i in range(n)]


SHAPES: dict[str, list[tuple[str, str | None]]] = {
    # 600 levels: the path above and the runs of its line read on.
    "deep chain": [(i, p) for i, p in zip(ids(600), [None, *ids(599)], strict=True)],
    # One entry with 500 children: its further branches read on, a window at a time.
    "wide fan": [("root0000", None), *[(i, "root0000") for i in ids(500, "f")]],
    # 400 roots: the other roots read on.
    "many roots": [(i, None) for i in ids(400)],
    # A branch whose entry has 120 children: read as a subtree, then its further children.
    "bushy branch": [
        ("r0000000", None),
        ("s0000000", "r0000000"),
        *[(i, "s0000000") for i in ids(120, "b")],
        *[(i, p) for i, p in zip(ids(70, "a"), ["r0000000", *ids(69, "a")], strict=True)],
    ],
    # A spine of 150 entries, each with a side leaf: every spine entry forks.
    "comb": [
        pair
        for n in range(150)
        for pair in ((f"s{n:07x}", f"s{n - 1:07x}" if n else None), (f"l{n:07x}", f"s{n:07x}"))
    ],
}


@pytest.fixture(scope="module")
def shaped(django_db_setup: Any, django_db_blocker: Any) -> Iterator[dict[str, Session]]:
    """One session of each shape, imported once for the module (as alice)."""
    with django_db_blocker.unblock():
        owner, _ = User.objects.get_or_create(username="tree-reader")
        sessions = {name: imported(owner, pi_file(shape), name) for name, shape in SHAPES.items()}
        yield sessions
        for session in sessions.values():
            services.session_delete(session=session, by=owner)
        owner.delete()


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_is_read_whole_through_the_pages_links(
    shape: str, shaped: dict[str, Session], small_windows: None
) -> None:
    session = shaped[shape]
    client = client_for(session.owner)
    every = set(Entry.objects.filter(session=session).values_list("entry_id", flat=True))

    with_htmx = read_with_htmx(client, session)

    assert len(with_htmx.ids) == len(set(with_htmx.ids)) == len(every)
    assert set(with_htmx.ids) == every
    # Each window holds at most its rows (and the first page at most one window).
    first = client.get(reverse("session", args=[session.id]) + "?tree=1").content.decode()
    assert len([i for i in items(tree_of(first)) if i[0] == "row"]) <= ROWS
    assert with_htmx.widest <= ROWS
    expected = {
        "deep chain": {"previous", "run"},
        "wide fan": {"children"},
        "many roots": {"roots"},
        "comb": {"previous"},
        "bushy branch": {"below", "children", "run"},
    }[shape]
    assert expected <= with_htmx.kinds, with_htmx.kinds

    without = read_without_javascript(client, session)
    assert set(without.ids) == every


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_is_read_whole_through_the_tree_api(
    shape: str, shaped: dict[str, Session], small_windows: None
) -> None:
    session = shaped[shape]
    api = Api(client_for(session.owner))
    rows, _ = tree_walk(api, session.id, limit=ROWS)
    found = [row["id"] for row in rows]
    every = set(Entry.objects.filter(session=session).values_list("entry_id", flat=True))
    assert len(found) == len(set(found)) == len(every) and set(found) == every
    depths = dict(Entry.objects.filter(session=session).values_list("entry_id", "depth"))
    assert {row["id"]: row["depth"] for row in rows} == depths


def test_a_whole_layout_is_read_in_its_own_order(alice: User, monkeypatch: Any) -> None:
    """A session laid out whole: the windows read on give Pi's rows, in Pi's order."""
    monkeypatch.setattr(tree_selectors, "TREE_ROWS", ROWS)
    session = imported(alice, branchy_file(400), "branchy")
    reading = read_with_htmx(client_for(alice), session)
    rows, _ = tree_walk(Api(client_for(alice)), session.id, limit=2000)
    assert reading.ids == [row["id"] for row in rows] and len(rows) == 400
    assert {"previous", "run"} <= reading.kinds


@pytest.mark.parametrize("shape", ["comb", "deep chain"])
@pytest.mark.parametrize("entries", [50, 300])  # laid out whole, drawn near the branch
def test_a_window_reads_its_entries_a_byte_budget_at_a_time(
    alice: User, small_windows: None, monkeypatch: Any, shape: str, entries: int
) -> None:
    """Small entries come in one read however many a window holds (a partial window's path
    and its branches: one each); with a budget smaller than any entry, each is read alone;
    either way the tree drawn is the same."""
    session = imported(alice, pi_file(SHAPES[shape][:entries]), shape)
    reads: list[int] = []
    by_id = tree_selectors.store.entries_by_id

    def counted(session_id: Any, wanted: list[str]) -> Any:
        reads.append(len(wanted))
        return by_id(session_id, wanted)

    monkeypatch.setattr(tree_selectors.store, "entries_by_id", counted)
    url = reverse("session", args=[session.id]) + "?tree=1"
    client = client_for(alice)
    drawn = tree_of(client.get(url).text)
    assert len(reads) <= 2 and max(reads) > tree_selectors.TREE_READ_CHUNK
    reads.clear()
    monkeypatch.setattr(tree_selectors, "TREE_READ_BYTES", 1)
    assert _csrf_blanked(tree_of(client.get(url).text)) == _csrf_blanked(drawn)
    assert reads and set(reads) == {1}


def _csrf_blanked(part: str) -> str:
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", part)


def test_a_run_of_a_long_line_opens_to_its_rows(alice: User, small_windows: None) -> None:
    session = imported(alice, pi_file(SHAPES["deep chain"]), "chain")
    client = client_for(alice)
    page = client.get(reverse("session", args=[session.id])).content.decode()
    tree = tree_of(page)
    # The window's 20 path entries: the first and the last (the leaf), a run between.
    assert tree.count('class="node ') == 2 and "18 entries" in tree
    run = re.search(r'data-tree-load="run"', tree)
    assert run is not None
    link = next(value for kind, value, what in items(tree) if what == "run")
    opened = client.get(reverse("session", args=[session.id]) + link, HTTP_HX_REQUEST="true")
    shown = re.findall(r'id="node-([^"]+)"', opened.content.decode())
    assert shown == [f"{i:07x}" for i in range(581, 599)]
    # Without JavaScript, the same link is a page of those rows.
    plain = client.get(reverse("session", args=[session.id]) + link.split("&fragment")[0])
    assert re.findall(r'id="node-([^"]+)"', tree_of(plain.content.decode())) == shown


def test_a_window_from_the_api_and_from_the_page_is_the_same(
    alice: User, small_windows: None
) -> None:
    session = imported(alice, pi_file(SHAPES["wide fan"]), "fan")
    api = Api(client_for(alice))
    first = body_of(api.get(f"/sessions/{session.id}/tree?limit={ROWS}"))
    cursor = first["children_cursors"].get("root0000") or next(
        row["children_cursor"] for row in first["nodes"] if row["children_cursor"]
    )
    from_api = body_of(api.get(f"/sessions/{session.id}/tree?limit={ROWS}&cursor={cursor}"))
    page = client_for(alice).get(
        reverse("session", args=[session.id]) + f"?tree_at={cursor}&fragment=tree-more",
        HTTP_HX_REQUEST="true",
    )
    shown = re.findall(r'id="node-([^"]+)"', page.content.decode())
    assert shown == [row["id"] for row in from_api["nodes"]] and len(shown) == ROWS


# --- who may read, and bad input ------------------------------------------------------------


def test_another_users_window_is_not_found(alice: User, bob: User, small_windows: None) -> None:
    session = imported(alice, pi_file(SHAPES["wide fan"]), "fan")
    cursor = cursor_encode(
        "children", as_of=session.last_seq, leaf=None, parent="root0000", after=-1, skip=None
    )
    url = reverse("session", args=[session.id]) + f"?tree=1&tree_at={cursor}"
    assert client_for(bob).get(url).status_code == 404
    assert (
        client_for(bob).get(url + "&fragment=tree-more", HTTP_HX_REQUEST="true").status_code == 404
    )
    assert (
        Api(client_for(bob)).get(f"/sessions/{session.id}/tree?cursor={cursor}").status_code == 404
    )
    # Alice's cursor asked of Bob's own session reads Bob's session only: none of hers.
    own = imported(bob, pi_file([("root0000", None), ("b0000001", "root0000")]), "bob's")
    found = client_for(bob).get(
        reverse("session", args=[own.id]) + f"?tree_at={cursor}&fragment=tree-more",
        HTTP_HX_REQUEST="true",
    )
    assert found.status_code == 200
    assert re.findall(r'id="node-([^"]+)"', found.content.decode()) == ["b0000001"]


@pytest.mark.parametrize(
    "query",
    [
        "?tree_at=bm90IGEgY3Vyc29y",  # "not a cursor"
        "?tree_at=" + cursor_encode("files", entry=None, offset=0),  # another kind
        "?tree_at=" + cursor_encode("rows", as_of=1, leaf=None, start=0, stop=5) + "&tree_rows=9-x",
    ],
)
def test_a_window_that_is_not_one_is_refused(alice: User, query: str) -> None:
    session = imported(alice, pi_file(SHAPES["comb"][:10]), "small")
    response = client_for(alice).get(reverse("session", args=[session.id]) + query)
    assert response.status_code == 400
    assert "tree_" in response.content.decode()


def test_a_guest_of_one_branch_reads_no_other_window(alice: User, small_windows: None) -> None:
    from sessions_app.services import shares

    session = imported(alice, pi_file(SHAPES["comb"]), "comb")
    link, token = shares.share_create(session=session, by=alice, branch=session.leaf_entry_id)
    cursor = cursor_encode("below", as_of=session.last_seq, leaf=None, parent="s0000010")
    page = Client().get(reverse("shared-session", args=[token]) + f"?tree_at={cursor}")
    assert page.status_code == 200
    tree = tree_of(page.content.decode())
    assert "l0000010" not in tree and "data-tree-load" not in tree  # no side leaf, no links
    assert 'id="tree-search"' not in page.content.decode()


# --- the tree's search --------------------------------------------------------------------------


def test_the_tree_search_asks_the_server_and_opens_the_window_of_a_hit(
    alice: User, bob: User, small_windows: None
) -> None:
    session = imported(alice, pi_file(SHAPES["deep chain"]), "chain")
    client = client_for(alice)
    base = reverse("session", args=[session.id])
    # An entry far above the first window: found by the server, not in the page.
    assert "0000007" not in client.get(base + "?tree=1").content.decode()
    found = client.get(
        base + "?tree=1&tree_q=entry 0000007&fragment=tree-found",
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="tree-found",
    ).content.decode()
    hit = re.search(r'data-tree-hit="0000007"', found)
    assert hit is not None and 'id="tree-found"' in found and 'id="tree"' not in found
    link = re.search(r'href="([^"#]+)#node-0000007"', found)
    assert link is not None
    opened = client.get(
        base + link.group(1).replace("&amp;", "&"), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="tree"
    ).content.decode()
    assert 'id="node-0000007"' in opened and 'id="node-panel"' in opened
    # Without JavaScript the form's page lists the hits beside the tree.
    plain = client.get(base + "?tree=1&tree_q=entry 0000007").content.decode()
    assert 'data-tree-hit="0000007"' in plain and 'id="tree"' in plain
    # A search of another's session is not found; a search that says nothing finds nothing.
    assert client_for(bob).get(base + "?tree_q=entry").status_code == 404
    none = client.get(
        base + "?tree_q=zzzqqq&fragment=tree-found",
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="tree-found",
    ).content.decode()
    assert "No entry of this session says that." in none


def test_the_tree_search_escapes_what_it_shows(alice: User) -> None:
    hostile = "<img src=x onerror=alert(1)> needle"
    data = pi_file([("h0000001", None)]).replace(b"entry h0000001", hostile.encode())
    session = imported(alice, data, "hostile")
    found = (
        client_for(alice)
        .get(
            reverse("session", args=[session.id]) + "?tree_q=needle&fragment=tree-found",
            HTTP_HX_REQUEST="true",
            HTTP_HX_TARGET="tree-found",
        )
        .content.decode()
    )
    assert "<img src=x" not in found and "&lt;img src=x" in found


@pytest.mark.parametrize(
    "fields",
    [
        {"k": "children", "as_of": 1, "leaf": None, "parent": "x"},  # no `after`, no `skip`
        {"k": "roots", "as_of": 1, "leaf": None, "after": "1", "skip": None},  # a text seq
        {"k": "near", "as_of": 1, "leaf": None, "end": "x" * 200},  # no entry id is that long
    ],
)
def test_the_tree_api_refuses_a_cursor_it_did_not_give(alice: User, fields: dict) -> None:
    import base64

    session = imported(alice, pi_file(SHAPES["comb"][:10]), "small")
    raw = base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")
    response = Api(client_for(alice)).get(f"/sessions/{session.id}/tree?cursor={raw}")
    assert response.status_code == 422 and body_of(response)["error"] == "invalid"
