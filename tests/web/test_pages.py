"""The pages through HTTP: the list, search, the three views, the tree, forms, exports."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from sessions_app import store
from sessions_app.models import Entry, Session, SessionDeletion
from sessions_app.services import demo
from tests.web.conftest import HOSTILE, client_for, conversation, message
from tests.web.tree_reading import read_with_htmx

pytestmark = pytest.mark.django_db

PI_FILE = demo.PI_DEMO_FILE


def page(session: Session, query: str = "") -> str:
    return reverse("session", args=[session.id]) + query


def imported(owner: User) -> Session:
    from sessions_app.services import pi_io

    with PI_FILE.open("rb") as source:
        return pi_io.pi_import(source=source, owner=owner, name="Imported").session


# --- the list ------------------------------------------------------------------------------


def test_list_shows_own_sessions_with_counts_and_tokens(alice: User, bob: User) -> None:
    conversation(alice, "Alice's first")
    conversation(bob, "Bob's secret")
    response = client_for(alice).get("/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "Alice&#x27;s first" in html
    assert "Bob" not in html
    assert re.search(r'data-label="Messages">\s*2\s*<', html)


def test_search_finds_titles_and_message_text_of_visible_sessions_only(
    alice: User, bob: User
) -> None:
    conversation(alice, "Parser work", ("How do we tokenize input?", "With a lexer."))
    conversation(alice, "Unrelated", ("Hello", "Hi there."))
    conversation(bob, "Bob tokenizes too", ("tokenize everything", "ok"))
    client = client_for(alice)
    by_text = client.get("/", {"q": "tokenizing"}).content.decode()
    assert "Parser work" in by_text and "Unrelated" not in by_text and "Bob" not in by_text
    by_title = client.get("/", {"q": "unrelated"}).content.decode()
    assert "Unrelated" in by_title and "Parser work" not in by_title
    by_answer = client.get("/", {"q": "lexer"}).content.decode()
    assert "Parser work" in by_answer


def test_search_as_htmx_returns_only_the_rows(alice: User) -> None:
    conversation(alice, "Parser work")
    response = client_for(alice).get(
        "/", {"q": "parser"}, headers={"HX-Request": "true", "HX-Target": "session-rows"}
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="session-rows"')
    assert "<html" not in html and "Parser work" in html


def test_new_session_starts_with_the_offline_model(alice: User) -> None:
    response = client_for(alice).post(
        reverse("session-new"), {"title": "Fresh", "preset": "offline"}
    )
    session = Session.objects.get(title="Fresh")
    assert response.status_code == 302 and response["Location"] == page(session)
    assert session.owner == alice and session.preset["provider"] == "offline"


def test_new_session_refuses_an_unknown_preset(alice: User) -> None:
    response = client_for(alice).post(reverse("session-new"), {"title": "X", "preset": "gpt-9"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert not Session.objects.filter(title="X").exists()


def test_import_of_a_pi_file_shows_its_tree(alice: User) -> None:
    upload = io.BytesIO(PI_FILE.read_bytes())
    upload.name = "branches.jsonl"
    client = client_for(alice)
    response = client.post(reverse("session-import"), {"file": upload})
    session = Session.objects.get(owner=alice)
    assert response.status_code == 302 and response["Location"] == page(session)
    html = client.get(page(session)).content.decode()
    assert html.count('class="node ') == Entry.objects.filter(session=session).count()
    assert "compacted" in html and "parser" in html  # markers and labels
    # Indentation is a class per level and a connector mark, never a text prefix.
    assert re.search(r'<li class="node d[1-9][0-9]? [^"]*"[^>]*><span class="conn', html)
    assert 'class="prefix"' not in html


def test_import_of_a_broken_file_says_why(alice: User) -> None:
    upload = io.BytesIO(b"not json at all\n")
    upload.name = "broken.jsonl"
    client = client_for(alice)
    response = client.post(reverse("session-import"), {"file": upload}, follow=True)
    assert "Could not import broken.jsonl" in response.content.decode()
    assert not Session.objects.filter(owner=alice).exists()


# --- the session page ----------------------------------------------------------------------


def test_chat_renders_markdown_and_the_tree_marks_the_current_leaf(talk: Session) -> None:
    html = client_for(talk.owner).get(page(talk)).content.decode()
    assert "<code>tests/</code>" in html
    assert 'class="node d0 t-message r-assistant on-path shown-leaf current' in html
    assert f'ws-connect="/ws/sessions/{talk.id}/?after_seq={talk.last_seq}"' in html


def test_imported_session_shows_compaction_and_branch_summary_cards(alice: User) -> None:
    session = imported(alice)
    client = client_for(alice)
    leaf = Entry.objects.filter(session=session, type="compaction").order_by("-seq").first()
    assert leaf is not None
    html = client.get(page(session, f"?leaf={leaf.entry_id}")).content.decode()
    assert "Compacted from" in html and "original item" in html
    assert "You are looking at another branch" in html
    summary = Entry.objects.filter(session=session, type="branch_summary").first()
    if summary is not None:
        html = client.get(page(session, f"?leaf={summary.entry_id}")).content.decode()
        assert "Summary of a branch left behind" in html


@pytest.mark.parametrize("view", ["chat", "trace", "context"])
def test_each_view_renders_as_a_page_and_as_an_htmx_partial(talk: Session, view: str) -> None:
    client = client_for(talk.owner)
    full = client.get(page(talk, f"?view={view}"))
    assert full.status_code == 200 and b"<html" in full.content
    assert f'data-view="{view}"'.encode() in full.content
    partial = client.get(
        page(talk, f"?view={view}"), headers={"HX-Request": "true", "HX-Target": "view"}
    )
    html = partial.content.decode()
    assert partial.status_code == 200
    assert html.lstrip().startswith('<section id="view"') and "<html" not in html
    assert 'id="tree"' not in html


def test_live_fragment_swaps_the_view_and_updates_the_rest_out_of_band(talk: Session) -> None:
    html = (
        client_for(talk.owner)
        .get(page(talk, "?fragment=live"), headers={"HX-Request": "true"})
        .content.decode()
    )
    assert html.lstrip().startswith('<section id="view"')
    for part in ("session-head", "tree", "composer-state", "approvals", "flash"):
        assert re.search(rf'id="{part}"[^>]*hx-swap-oob="outerHTML"', html), part


def test_context_without_requests_shows_the_next_context(talk: Session) -> None:
    html = client_for(talk.owner).get(page(talk, "?view=context")).content.decode()
    assert "No model request was recorded" in html
    assert "Where are the tests?" in html and "≈" in html


def test_deep_link_to_an_entry_highlights_it(talk: Session) -> None:
    first = Entry.objects.filter(session=talk).order_by("seq").first()
    assert first is not None
    html = client_for(talk.owner).get(page(talk, f"?entry={first.entry_id}")).content.decode()
    assert f'class="msg user target" id="entry-{first.entry_id}"' in html
    assert 'id="node-panel"' in html  # the tree's actions for that entry


def test_unknown_leaf_in_a_deep_link_falls_back_to_the_current_leaf(talk: Session) -> None:
    html = client_for(talk.owner).get(page(talk, "?leaf=nope")).content.decode()
    assert "another branch" not in html and "In <code>tests/</code>" in html


# --- changing a session ------------------------------------------------------------------


def test_clicking_a_node_moves_the_leaf_and_the_chat_follows(talk: Session) -> None:
    first = Entry.objects.filter(session=talk).order_by("seq").first()
    assert first is not None
    client = client_for(talk.owner)
    response = client.post(
        reverse("session-leaf", args=[talk.id]),
        {"entry_id": first.entry_id, "return_to": "?view=chat"},
        headers={"HX-Request": "true"},
    )
    talk.refresh_from_db()
    assert talk.leaf_entry_id == first.entry_id
    assert store.events_after(talk.id, talk.last_seq - 1)[0].type == "leaf/moved"
    html = response.content.decode()
    assert response["HX-Retarget"] == "#view"
    assert "Where are the tests?" in html and "In <code>tests/</code>" not in html


def test_rename_and_label(talk: Session) -> None:
    client = client_for(talk.owner)
    client.post(reverse("session-rename", args=[talk.id]), {"title": "Renamed"})
    talk.refresh_from_db()
    assert talk.title == "Renamed"
    target = Entry.objects.filter(session=talk).order_by("seq").first()
    assert target is not None
    client.post(
        reverse("session-label", args=[talk.id]), {"entry_id": target.entry_id, "label": "start"}
    )
    label = Entry.objects.get(session=talk, type="label")
    assert label.data["targetId"] == target.entry_id and label.data["label"] == "start"
    html = client.get(page(talk)).content.decode()
    assert '<span class="label-badge" title="Label">start</span>' in html


def test_fork_makes_a_new_session_from_an_entry(talk: Session) -> None:
    first = Entry.objects.filter(session=talk).order_by("seq").first()
    assert first is not None
    response = client_for(talk.owner).post(
        reverse("session-fork", args=[talk.id]), {"entry_id": first.entry_id}
    )
    fork = Session.objects.get(parent=talk)
    assert response["Location"] == page(fork)
    assert fork.owner == talk.owner and fork.message_count == 1


def test_delete_asks_first_then_deletes(talk: Session) -> None:
    client = client_for(talk.owner)
    confirm = client.get(reverse("session-delete", args=[talk.id]))
    assert b"Delete this session?" in confirm.content
    assert Session.objects.filter(id=talk.id).exists()
    response = client.post(reverse("session-delete", args=[talk.id]))
    assert response["Location"] == "/"
    assert not Session.objects.filter(id=talk.id).exists()
    assert SessionDeletion.objects.get(session_id=talk.id).deleted_by == "alice"


def test_resend_refuses_anything_but_a_user_message(talk: Session) -> None:
    answer = Entry.objects.filter(session=talk).order_by("seq").last()
    assert answer is not None
    response = client_for(talk.owner).post(
        reverse("session-resend", args=[talk.id]),
        {"entry_id": answer.entry_id, "text": "again"},
        follow=True,
    )
    assert "only a user message can be edited" in response.content.decode()


# --- exports -------------------------------------------------------------------------------


def exported(owner: User, session: Session) -> str:
    response = client_for(owner).get(reverse("session-export-html", args=[session.id]))
    assert response.status_code == 200 and response.streaming
    return b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]


def test_html_export_is_self_contained(alice: User) -> None:
    from sessions_app.services import pi_io

    session = imported(alice)
    response = client_for(alice).get(reverse("session-export-html", args=[session.id]))
    assert response["Content-Disposition"].startswith('attachment; filename="imported-')
    html = exported(alice, session)
    assert "<style>" in html
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', html)
    # Each entry is in the file once, as its Pi line, which the file's script draws from.
    data = re.search(r'<script type="application/x-ndjson" id="pi-jsonl">([^<]*)</script>', html)
    assert data is not None
    lines = data.group(1).splitlines()
    assert [json.loads(line) for line in lines] == [
        json.loads(line) for line in pi_io.pi_export_lines(session)
    ]
    assert "<template" not in html
    # The tree's rows are data for the script: one per entry, with its indent as a number.
    tree = re.search(r'<script type="application/json" id="tree-data">([^<]*)</script>', html)
    assert tree is not None
    rows = json.loads(tree.group(1))["rows"]
    ids = sorted(row[0] for row in rows)
    assert ids == sorted(Entry.objects.filter(session=session).values_list("entry_id", flat=True))
    assert all(isinstance(row[2], int) for row in rows)


def test_jsonl_export_round_trips_the_entries(talk: Session) -> None:
    response = client_for(talk.owner).get(reverse("session-export-jsonl", args=[talk.id]))
    lines = b"".join(response.streaming_content).decode().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 + Entry.objects.filter(session=talk).count()


# --- hostile content -------------------------------------------------------------------------


def test_hostile_content_is_escaped_in_every_view_and_the_export(alice: User) -> None:
    session = conversation(alice, HOSTILE, (HOSTILE, HOSTILE))
    target = Entry.objects.filter(session=session).order_by("seq").first()
    assert target is not None
    store.append_events(
        session.id,
        session.last_seq,
        [
            message("user", f"**{HOSTILE}**"),
            store.NewEvent(
                "entry/label",
                {"entry": {"type": "label", "targetId": target.entry_id, "label": HOSTILE}},
            ),
        ],
    )
    client = client_for(alice)
    pages = [client.get(page(session, f"?view={v}")).content for v in ("chat", "trace", "context")]
    pages.append(client.get("/").content)
    pages.append(exported(alice, session).encode())
    for html in (p.decode() for p in pages):
        assert '<script>alert("x")' not in html
        assert "<img src=x" not in html
        assert 'href="javascript:' not in html


def test_static_files_are_vendored() -> None:
    root = Path(__file__).resolve().parents[2] / "static" / "vendor"
    assert "htmx" in (root / "htmx.min.js").read_text()[:200]
    assert "htmx.defineExtension('ws'" in (root / "ws.js").read_text()


# --- turns: the trace window and the running state ----------------------------------------


def turns(session: Session, count: int, *, last_open: bool = False) -> None:
    """`count` short turns, each a user message and an answer (the last one left open)."""
    events: list[store.NewEvent] = []
    for turn in range(1, count + 1):
        events += [
            store.NewEvent("turn/start", {"turn": turn}),
            replace(message("user", f"question {turn}"), turn=turn),
            replace(message("assistant", f"answer {turn}"), turn=turn),
        ]
        if not (last_open and turn == count):
            events.append(store.NewEvent("turn/end", {"turn": turn, "reason": "completed"}))
    session.refresh_from_db()
    store.append_events(session.id, session.last_seq, events)


def test_trace_shows_the_latest_turns_first_and_older_ones_on_demand(alice: User) -> None:
    session = conversation(alice, "Many turns")
    turns(session, 25)
    client = client_for(alice)
    html = client.get(page(session, "?view=trace")).content.decode()
    assert html.count('class="turn-block status') == 20
    assert html.index('id="turn-25"') < html.index('id="turn-6"')
    assert 'id="turn-5"' not in html
    assert 'hx-trigger="revealed"' in html and "before=6" in html
    older = client.get(
        page(session, "?view=trace&before=6&fragment=trace-older"), headers={"HX-Request": "true"}
    ).content.decode()
    assert older.count('class="turn-block status') == 5 and "<html" not in older
    assert 'hx-trigger="revealed"' not in older


def test_a_turn_left_open_by_a_dead_process_shows_as_interrupted(alice: User) -> None:
    session = conversation(alice, "Crashed")
    turns(session, 1, last_open=True)
    client = client_for(alice)
    assert (
        '<span class="pill state interrupted">interrupted</span>'
        in client.get("/").content.decode()
    )
    html = client.get(page(session)).content.decode()
    assert 'data-state="interrupted"' in html
    assert 'data-running="false"' in html  # a new message is allowed; recovery runs first


def test_images_in_messages_are_shown_as_data_uris_only_for_raster_types(alice: User) -> None:
    session = services_session(alice)
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    content = [
        {"type": "text", "text": "look"},
        {"type": "image", "mimeType": "image/png", "data": png},
        {"type": "image", "mimeType": "text/html", "data": "PHNjcmlwdD4="},
        {"type": "image", "mimeType": "image/svg+xml", "data": "PHN2Zz4="},
    ]
    store.append_events(
        session.id,
        session.last_seq,
        [
            store.NewEvent(
                "user/message",
                {"entry": {"type": "message", "message": {"role": "user", "content": content}}},
            )
        ],
    )
    html = client_for(alice).get(page(session)).content.decode()
    assert f'src="data:image/png;base64,{png}"' in html
    assert "data:text/html" not in html and "data:image/svg+xml;base64" not in html


def services_session(owner: User) -> Session:
    from sessions_app import services

    return services.session_create(owner=owner, title="Pictures")


def test_imports_are_rate_limited(alice: User, settings: object) -> None:
    settings.STRAND_RATE_LIMITS = {"import": (1, 3600)}  # type: ignore[attr-defined]
    client = client_for(alice)
    for _ in range(2):
        upload = io.BytesIO(PI_FILE.read_bytes())
        upload.name = "again.jsonl"
        response = client.post(reverse("session-import"), {"file": upload}, follow=True)
    assert response.status_code == 429 and int(response["Retry-After"]) > 0
    assert "Too many imports: at most 1 per hour." in response.content.decode()
    assert Session.objects.filter(owner=alice).count() == 1


def test_long_branches_are_drawn_by_window(alice: User, monkeypatch: pytest.MonkeyPatch) -> None:
    from sessions_app.selectors import pages, tree

    monkeypatch.setattr(pages, "CHAT_ENTRIES", 20)
    monkeypatch.setattr(tree, "TREE_ROWS", 30)
    pairs = [(f"question {i}", f"answer {i}") for i in range(40)]
    session = conversation(alice, "Long", *pairs)
    client = client_for(alice)
    html = client.get(page(session)).content.decode()
    assert "Show 60 earlier entries of this branch" in html
    assert "question 29" not in html.split('id="chat"')[1] and "question 39" in html
    # The window's 30 rows: the first and last of the line, a run of the 28 between.
    assert html.count('class="node ') == 2 and "28 entries" in html and "50 entries above" in html
    everything = client.get(page(session, "?all=1&tree=1")).content.decode()
    assert everything.count('class="msg user') == 40
    # The whole tree is read on from there, a window at a time, each entry once.
    whole = read_with_htmx(client, session, "?tree=1")
    assert len(whole.ids) == len(set(whole.ids)) == 80 and {"previous", "run"} <= whole.kinds
    first = Entry.objects.filter(session=session).order_by("seq").first()
    assert first is not None
    linked = client.get(page(session, f"?entry={first.entry_id}")).content.decode()
    assert f'id="entry-{first.entry_id}"' in linked and f'id="node-{first.entry_id}"' in linked


def test_a_large_tree_is_drawn_near_the_branch_shown(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessions_app import services
    from sessions_app.selectors import tree as tree_selectors

    monkeypatch.setattr(tree_selectors, "TREE_FULL_LIMIT", 10)
    monkeypatch.setattr(tree_selectors, "TREE_ROWS", 20)
    session = conversation(alice, "Large", *[(f"q{i}", f"a{i}") for i in range(30)])
    fork_point = Entry.objects.filter(session=session).order_by("-seq")[3]
    services.session_move_leaf(session=session, to=fork_point.entry_id)
    session.refresh_from_db()
    store.append_events(session.id, session.last_seq, [message("user", "a side branch")])
    session.refresh_from_db()
    html = client_for(alice).get(page(session)).content.decode()
    tree = html[html.index('id="tree"') : html.index('id="view"')]
    assert tree.count('class="node ') == 10 + 1  # the path's end and the branch it left
    assert "earlier entries of this branch" in tree and "a side branch" in tree
    assert ">a28<" in tree and ">q29<" not in tree  # only the first entry of that branch
    whole = read_with_htmx(client_for(alice), session)
    assert sorted(whole.ids) == sorted(
        Entry.objects.filter(session=session).values_list("entry_id", flat=True)
    )
    assert len(whole.ids) == 61 and {"previous", "below"} <= whole.kinds
