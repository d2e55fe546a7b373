"""The API answers what the session page shows: the same window through both doors, with
cursors that read on (the path above, older turns, the rows before and after, a subtree);
every door refuses a leaf move alike while a turn runs; whole reads are streamed exports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import AsyncClient, Client
from django.urls import reverse

from runtime import TurnRunning
from sessions_app import agent, selectors, services, store
from sessions_app.agent import turn_lock_key
from sessions_app.models import Entry, Session
from sessions_app.selectors import tree as tree_selectors
from sessions_app.services import pi_io, tokens
from sessions_app.store import NewEvent
from tests.api.conftest import OFFLINE_PRESET, Api, body_of, tree_walk, wait_for, wait_idle

TURNS = 320  # 640 entries on the main path: more than the chat's and the tree's windows
SIDE_AT = 10  # the turn whose reply a side branch of SIDE_TURNS turns leaves from
SIDE_TURNS = 3


def message(role: str, text: str, turn: int) -> NewEvent:
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    kind = "user/message" if role == "user" else "assistant/message"
    entry = {"type": "message", "message": {"role": role, "content": content}}
    return NewEvent(kind, {"entry": entry}, turn=turn)


def turn(n: int) -> list[NewEvent]:
    return [
        NewEvent("turn/start", {"turn": n}, turn=n),
        message("user", f"question {n}", n),
        message("assistant", f"answer {n}", n),
        NewEvent("turn/end", {"turn": n, "reason": "completed"}, turn=n),
    ]


def append(session: Session, events: list[NewEvent]) -> None:
    for start in range(0, len(events), 400):
        session.refresh_from_db()
        store.append_events(session.id, session.last_seq, events[start : start + 400])
    session.refresh_from_db()


@pytest.fixture
def long_talk(alice: Any) -> Session:
    """TURNS turns on the main path, and a side branch of SIDE_TURNS turns (numbered after
    them) leaving the reply of turn SIDE_AT; the current leaf is the main path's end."""
    session = services.session_create(owner=alice, title="long")
    append(session, [event for n in range(1, TURNS + 1) for event in turn(n)])
    main_leaf = session.leaf_entry_id
    side_at = Entry.objects.get(session=session, seq=turn_seq(session, SIDE_AT) + 2).entry_id
    moves = [NewEvent("leaf/moved", {"to": side_at, "reason": "navigate"})]
    side = [e for n in range(TURNS + 1, TURNS + 1 + SIDE_TURNS) for e in turn(n)]
    back = [NewEvent("leaf/moved", {"to": main_leaf, "reason": "navigate"})]
    append(session, moves + side + back)
    return session


def turn_seq(session: Session, n: int) -> int:
    return next(e.seq for e in store.events_of_turns(session.id, [n]) if e.type == "turn/start")


def page_html(user: Any, session: Session, query: str = "") -> str:
    client = Client()
    client.force_login(user)
    response = client.get(reverse("session", args=[session.id]) + query)
    assert response.status_code == 200
    return response.content.decode()


def ids_in(html: str, prefix: str) -> list[str]:
    return re.findall(rf'id="{prefix}-([0-9a-f]+)"', html)


def part(html: str, start: str, end: str) -> str:
    return html[html.index(start) : html.index(end)]


def tree_ids(user: Any, session: Session, html: str) -> list[str]:
    """The ids of the page tree's rows, each folded run of a long stretch opened as a click
    on it does (its window's rows, asked for by htmx)."""
    client = Client()
    client.force_login(user)
    found: list[str] = []
    tree = part(html, 'id="tree"', 'id="main"')
    for piece in re.split(r'(<li class="tree-load [^"]*load-run.*?</li>)', tree, flags=re.S):
        run = re.search(r'hx-get="([^"]+)"', piece) if "load-run" in piece else None
        if run is None:
            found += ids_in(piece, "node")
            continue
        url = reverse("session", args=[session.id]) + run.group(1).replace("&amp;", "&")
        opened = client.get(url, HTTP_HX_REQUEST="true")
        assert opened.status_code == 200
        found += ids_in(opened.content.decode(), "node")
    return found


# --- the same answer -----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_chat_is_the_pages_window(as_alice: Api, alice: Any, long_talk: Session) -> None:
    html = page_html(alice, long_talk)
    chat = body_of(as_alice.get(f"/sessions/{long_talk.id}/views/chat"))
    shown = ids_in(part(html, 'id="chat"', 'id="stream"'), "entry")
    assert [item["entry_id"] for item in chat["items"]] == shown
    assert len(shown) == selectors.CHAT_ENTRIES
    hidden = 2 * TURNS - selectors.CHAT_ENTRIES
    assert chat["entries_above"] == hidden and chat["path_length"] == 2 * TURNS
    assert f"Show {hidden} earlier entries of this branch" in html


@pytest.mark.django_db
def test_the_trace_is_the_pages_window(as_alice: Api, alice: Any, long_talk: Session) -> None:
    html = page_html(alice, long_talk, "?view=trace")
    trace = body_of(as_alice.get(f"/sessions/{long_talk.id}/views/trace"))
    turns = [span["key"] for span in trace["spans"] if span["kind"] == "turn"]
    blocks = re.findall(r'<section class="turn-block [^"]*" id="([^"]+)"', html)
    assert sorted(blocks) == sorted(turns) and len(turns) == 20
    assert trace["turns"] == list(range(TURNS - 19, TURNS + 1))
    assert trace["turn_count"] == TURNS and trace["turns_complete"] is True
    assert f"before={trace['older_turn']}" in html


@pytest.mark.django_db
def test_the_tree_is_the_pages_window(
    as_alice: Api, alice: Any, long_talk: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    def both(query: str = "") -> tuple[list[str], dict]:
        html = page_html(alice, long_talk, query)
        tree = body_of(as_alice.get(f"/sessions/{long_talk.id}/tree"))
        return tree_ids(alice, long_talk, html), tree

    shown, tree = both()
    assert [n["id"] for n in tree["nodes"]] == shown and len(shown) == selectors.TREE_ROWS
    assert not tree["partial"] and tree["rows_above"] + len(shown) == tree["node_count"]
    html = page_html(alice, long_talk)
    assert f"{tree['rows_above']} entries above" in html and "load-run" in html
    # A large session: both draw the end of the branch and the branches that leave it.
    monkeypatch.setattr(tree_selectors, "TREE_FULL_LIMIT", 100)
    shown, tree = both()
    assert tree["partial"] and [n["id"] for n in tree["nodes"]] == shown
    assert tree["rows_above"] == 2 * TURNS - selectors.TREE_ROWS // 2


# --- reading on ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_chat_reads_the_whole_path_a_window_at_a_time(
    as_alice: Api, long_talk: Session
) -> None:
    path = [e.id for e in store.path_to_root(long_talk.id, long_talk.leaf_entry_id or "")]
    base = f"/sessions/{long_talk.id}"
    windows: list[list[str]] = []
    page = body_of(as_alice.get(f"{base}/views/chat?limit=70"))
    while True:
        windows.insert(0, [item["entry_id"] for item in page["items"]])
        assert len(windows[0]) <= 70
        if page["older_cursor"] is None:
            break
        page = body_of(as_alice.get(f"{base}/views/chat?limit=70&cursor={page['older_cursor']}"))
    assert [entry for window in windows for entry in window] == path
    assert page["entries_above"] == 0
    # The entries of the path, window by window, the same way.
    found: list[str] = []
    query = "path=1&limit=70"
    while query:
        page = body_of(as_alice.get(f"{base}/entries?{query}"))
        found[:0] = [e["id"] for e in page["entries"]]
        query = f"cursor={page['older_cursor']}" if page["older_cursor"] else ""
    assert found == path
    forged = as_alice.get(f"{base}/views/chat?cursor=eyJrIjoicGF0aCJ9")  # {"k":"path"}
    assert forged.status_code == 422 and body_of(forged)["error"] == "invalid"


@pytest.mark.django_db
def test_the_trace_reads_older_turns_and_the_whole_session_on_request(
    as_alice: Api, long_talk: Session
) -> None:
    base = f"/sessions/{long_talk.id}/views/trace?turns=50"
    seen: list[int] = []
    page = body_of(as_alice.get(base))
    while True:
        seen[:0] = page["turns"]
        if page["older_turn"] is None:
            break
        page = body_of(as_alice.get(f"{base}&before_turn={page['older_turn']}"))
    assert seen == list(range(1, TURNS + 1))  # the branch's turns: not the side branch's
    everything = body_of(as_alice.get(f"{base}&scope=all"))
    assert everything["turns"][-SIDE_TURNS:] == list(range(TURNS + 1, TURNS + SIDE_TURNS + 1))
    side_leaf = Entry.objects.filter(session=long_talk).order_by("-seq")[0].entry_id
    side = body_of(as_alice.get(f"{base}&leaf={side_leaf}"))
    assert side["turns"][-SIDE_TURNS:] == list(range(TURNS + 1, TURNS + SIDE_TURNS + 1))
    assert SIDE_AT + 1 not in side["turns"]


@pytest.mark.django_db
def test_a_large_tree_is_read_whole_through_the_path_above_and_subtrees(
    as_alice: Api, long_talk: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tree_selectors, "TREE_FULL_LIMIT", 100)
    rows, _ = tree_walk(as_alice, long_talk.id, limit=40)
    entries = {e.entry_id: e.depth for e in Entry.objects.filter(session=long_talk)}
    assert sorted(row["id"] for row in rows) == sorted(entries)  # each entry once
    assert {row["id"]: row["depth"] for row in rows} == entries
    # The side branch hangs from the reply it leaves, as a subtree to read.
    first = body_of(as_alice.get(f"/sessions/{long_talk.id}/tree?limit=40"))
    assert first["partial"] and first["previous_cursor"] and not first["next_cursor"]
    side_start = Entry.objects.get(session=long_talk, seq=turn_seq(long_talk, TURNS + 1) + 1)
    [stub] = [row for row in rows if row["id"] == side_start.entry_id]
    assert stub["subtree_cursor"] and not stub["on_active_path"]


# --- one rule for leaf moves -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_every_door_refuses_a_leaf_move_while_a_turn_runs(
    as_alice: Api, alice: Any, workspace: Path
) -> None:
    session = services.session_create(
        owner=alice, title="busy", cwd=str(workspace), preset=OFFLINE_PRESET
    )
    sent = as_alice.post(f"/sessions/{session.id}/messages", {"text": "write notes.txt: changed"})
    assert sent.status_code == 202
    approval = wait_for(lambda: body_of(as_alice.get(f"/sessions/{session.id}/approvals")))
    session.refresh_from_db()
    before = (session.last_seq, session.leaf_entry_id)
    first = store.entries_of(session.id)[0].id

    refused = as_alice.put(f"/sessions/{session.id}/leaf", {"entry_id": first})
    assert refused.status_code == 409
    error = body_of(refused)
    assert error["error"] == "conflict"
    assert error["detail"] == "a turn is running in this session: wait for it or cancel it first"

    client = Client()
    client.force_login(alice)
    page = client.post(
        reverse("session-leaf", args=[session.id]), {"entry_id": first}, follow=True
    ).content.decode()
    assert "a turn is running in this session: wait for it or cancel it first" in page

    with pytest.raises(TurnRunning) as navigated:
        agent.agent_navigate(session.id, first)
    assert str(navigated.value) == error["detail"]
    session.refresh_from_db()
    assert (session.last_seq, session.leaf_entry_id) == before

    decided = as_alice.post(
        f"/sessions/{session.id}/approvals/{approval[0]['approval_id']}", {"outcome": "rejected"}
    )
    assert decided.status_code == 204
    wait_idle(session)
    moved = as_alice.put(f"/sessions/{session.id}/leaf", {"entry_id": first})
    assert moved.status_code == 200 and body_of(moved)["leaf_entry_id"] == first


@pytest.mark.django_db
def test_a_leaf_move_waits_for_other_work_on_the_lock_then_says_the_session_is_busy(
    as_alice: Api, alice_session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "LOCK_WAIT_S", 0.2)
    db = connection.settings_dict
    with psycopg.connect(
        dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"] or None,
        host=db["HOST"] or None, port=db["PORT"] or None, autocommit=True,
    ) as holder:  # fmt: skip
        holder.execute("SELECT pg_advisory_lock(%s)", [turn_lock_key(alice_session.id)])
        refused = as_alice.put(f"/sessions/{alice_session.id}/leaf", {"entry_id": None})
    assert refused.status_code == 409
    assert (
        body_of(refused)["detail"] == "the session is busy (a compaction or navigation is running)"
    )
    alice_session.refresh_from_db()
    assert alice_session.leaf_entry_id is not None
    assert as_alice.put(f"/sessions/{alice_session.id}/leaf", {"entry_id": None}).status_code == 200


# --- whole reads: streamed exports only --------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_pi_exports_stream_a_chunk_at_a_time(
    alice: Any, alice_session: Session
) -> None:
    _, token = tokens.token_create(alice, "export")
    expected = "".join(pi_io.pi_export_lines(alice_session))

    async def read(client: AsyncClient, path: str, **headers: str) -> tuple[bool, str]:
        response = await client.get(path, headers=headers)
        assert response.status_code == 200 and response.streaming, response.content
        streamed: Any = response  # a StreamingHttpResponse under the test client's wrapper
        chunks = [chunk async for chunk in streamed.streaming_content]
        return streamed.is_async, b"".join(chunks).decode()

    async def both() -> list[tuple[bool, str]]:
        page = AsyncClient()
        await page.aforce_login(alice)
        return [
            await read(
                AsyncClient(),
                f"/api/sessions/{alice_session.id}/export",
                Authorization=f"Bearer {token}",
            ),
            await read(page, reverse("session-export-jsonl", args=[alice_session.id])),
        ]

    for is_async, body in async_to_sync(both)():
        assert is_async and body == expected


@pytest.mark.django_db
def test_a_subtree_longer_than_a_window_is_read_down_its_chain(
    as_alice: Api, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Main path m0…m9; a side branch s0…s9 from m2, with its own branch t0…t2 from s4."""
    session = services.session_create(owner=alice, title="branches")

    def chain(prefix: str, count: int, parent: str | None) -> list[str]:
        moves = [NewEvent("leaf/moved", {"to": parent, "reason": "navigate"})] if parent else []
        texts = [
            NewEvent("user/message", {"entry": {"type": "message", "message": m}})
            for m in ({"role": "user", "content": f"{prefix}{i}"} for i in range(count))
        ]
        session.refresh_from_db()
        return list(store.append_events(session.id, session.last_seq, moves + texts).entry_ids)

    main = chain("m", 10, None)
    side = chain("s", 10, main[2])
    chain("t", 3, side[4])
    session.refresh_from_db()
    back = NewEvent("leaf/moved", {"to": main[-1], "reason": "navigate"})
    store.append_events(session.id, session.last_seq, [back])
    monkeypatch.setattr(tree_selectors, "TREE_FULL_LIMIT", 5)

    rows, _ = tree_walk(as_alice, session.id, limit=6)
    entries = {e.entry_id: e.depth for e in Entry.objects.filter(session=session)}
    assert len(rows) == len(entries) == 23
    assert {row["id"]: row["depth"] for row in rows} == entries
    texts = [row["text"] for row in rows]
    # Reading order: the side branch after the row it leaves from, its own branch after s4.
    assert texts.index("s0") > texts.index("m3") and texts.index("t0") > texts.index("s4")
    [stub] = [row for row in rows if row["text"] == "s0"]
    below = body_of(
        as_alice.get(f"/sessions/{session.id}/tree?limit=6&cursor={stub['subtree_cursor']}")
    )
    assert [n["text"] for n in below["nodes"]][:3] == ["s1", "s2", "s3"] and below["next_cursor"]
