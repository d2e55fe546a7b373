"""The compare page: two branches side by side from their divergence, at its own URL,
without JavaScript; reached from a tree node's actions."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User

from sessions_app import services, store
from sessions_app.models import Session
from sessions_app.store import NewEvent
from tests.web.conftest import HOSTILE, client_for, message

pytestmark = pytest.mark.django_db


def append(session: Session, events: list[NewEvent]) -> list[str]:
    session.refresh_from_db()
    ids = store.append_events(session.id, session.last_seq, events).entry_ids
    session.refresh_from_db()
    return list(ids)


@pytest.fixture
def branched(alice: User) -> tuple[Session, dict[str, str]]:
    """A shared question and answer, then branch A of 60 entries (one holding markup) and
    branch B of two; the current leaf is B's end."""
    session = services.session_create(owner=alice, title="Two tries", cwd="")
    _, shared = append(session, [message("user", "the question"), message("assistant", "a look")])
    a_events = [message("assistant", HOSTILE)] + [
        message("user" if i % 2 else "assistant", f"A step {i}") for i in range(1, 60)
    ]
    a_ids = append(session, a_events)
    moved = NewEvent("leaf/moved", {"to": shared, "reason": "navigate"})
    b_ids = append(session, [moved, message("user", "B asks"), message("assistant", "B answers")])
    return session, {"ancestor": shared, "a": a_ids[-1], "b": b_ids[-1], "hostile": a_ids[0]}


def url(session: Session, query: str) -> str:
    return f"/sessions/{session.id}/compare?{query}"


def test_the_page_shows_both_branches_from_the_divergence(
    alice: User, branched: tuple[Session, dict[str, str]]
) -> None:
    session, ids = branched

    response = client_for(alice).get(url(session, f"a={ids['a']}&b={ids['b']}"))

    assert response.status_code == 200
    html = response.content.decode()
    assert f"<code>{ids['ancestor']}</code>" in html
    assert "B asks" in html and "B answers" in html and "A step 1" in html
    assert "60 entries after the divergence" in html
    # Model output is text, never markup.
    assert "<script>alert" not in html and "&lt;script&gt;alert(&quot;x&quot;)" in html
    rows = html.split('class="compare-rows"')[1]
    assert "A step 49" in rows and "A step 50" not in rows  # 50 rows a page
    assert 'offset=50#row-50" rel="next">Show more' in html


def test_show_more_reads_the_next_rows(
    alice: User, branched: tuple[Session, dict[str, str]]
) -> None:
    session, ids = branched
    first = client_for(alice).get(url(session, f"a={ids['a']}&b={ids['b']}")).content.decode()
    more = re.search(r'href="(\?[^"]*offset=50)#row-50" rel="next"', first)
    assert more is not None

    html = client_for(alice).get(url(session, more.group(1)[1:].replace("&amp;", "&"))).content
    page = html.decode()
    rows = page.split('class="compare-rows"')[1]

    assert "A step 50" in rows and "A step 59" in rows and "A step 49" not in rows
    assert 'rel="next"' not in page
    assert "Back to the divergence" in page


def test_a_defaults_to_the_current_leaf(
    alice: User, branched: tuple[Session, dict[str, str]]
) -> None:
    session, ids = branched

    html = client_for(alice).get(url(session, f"b={ids['a']}")).content.decode()

    assert f'A · <a href="/sessions/{session.id}/?leaf={ids["b"]}">' in html


@pytest.mark.parametrize(
    ("query", "status"),
    [("a={a}&b=nosuch", 404), ("a={a}", 400), ("a={a}&b={b}&offset=x", 400)],
)
def test_bad_requests_are_refused(
    alice: User, branched: tuple[Session, dict[str, str]], query: str, status: int
) -> None:
    session, ids = branched

    response = client_for(alice).get(url(session, query.format(a=ids["a"], b=ids["b"])))

    assert response.status_code == status


def test_only_who_may_read_the_session_sees_the_comparison(
    bob: User, carol: User, branched: tuple[Session, dict[str, str]]
) -> None:
    session, ids = branched
    query = f"a={ids['a']}&b={ids['b']}"

    assert client_for(bob).get(url(session, query)).status_code == 404
    assert client_for(carol).get(url(session, query)).status_code == 200  # staff read
    anonymous = client_for(None).get(url(session, query))
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]


def test_a_tree_node_offers_to_compare_it_with_the_branch_shown(
    alice: User, branched: tuple[Session, dict[str, str]]
) -> None:
    session, ids = branched

    page = client_for(alice).get(f"/sessions/{session.id}/?entry={ids['a']}").content.decode()
    link = re.search(r'<a class="compare-with" href="([^"]+)"', page)

    assert link is not None
    target = link.group(1).replace("&amp;", "&")
    assert target == f"/sessions/{session.id}/compare?b={ids['a']}"
    assert client_for(alice).get(target).status_code == 200


def test_staff_may_compare_any_session(
    carol: Any, branched: tuple[Session, dict[str, str]]
) -> None:
    session, ids = branched

    html = client_for(carol).get(url(session, f"a={ids['hostile']}&b={ids['b']}")).content
    assert b"Two branches compared" in html


def htmx(target: str) -> dict[str, str]:
    return {"HX-Request": "true", "HX-Target": target}


def test_show_more_through_htmx_answers_the_next_rows_alone(
    alice: User, branched: tuple[Session, dict[str, str]]
) -> None:
    session, ids = branched

    response = client_for(alice).get(
        url(session, f"a={ids['a']}&b={ids['b']}&offset=50"), headers=htmx("compare-more")
    )

    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html and "compare-totals" not in html
    assert html.count('class="compare-row"') == 10 and 'id="row-50"' in html
    assert 'id="compare-more"' in html and "End of both branches" in html


def test_a_live_update_redraws_the_summary_of_the_current_leaf(
    alice: User, branched: tuple[Session, dict[str, str]]
) -> None:
    session, ids = branched
    page = client_for(alice).get(url(session, f"b={ids['a']}")).content.decode()
    live = re.search(r'id="view"[^>]*data-live-url="([^"]+)"', page)
    assert live is not None and "a=" not in live.group(1)  # A follows the current leaf
    append(session, [message("user", "B goes on")])

    response = client_for(alice).get(live.group(1).replace("&amp;", "&"), headers=htmx("view"))

    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html and "compare-row" not in html
    assert html.lstrip().startswith('<div id="view"')
    assert "<th>Entries</th><td>3</td><td>60</td>" in html


def test_two_nodes_picked_in_the_tree_are_compared(
    alice: User, branched: tuple[Session, dict[str, str]]
) -> None:
    session, ids = branched
    client = client_for(alice)
    first = client.get(f"/sessions/{session.id}/?entry={ids['a']}").content.decode()
    mark = re.search(r'<a class="mark-compare" href="([^"#]+)', first)
    assert mark is not None

    marked = client.get(f"/sessions/{session.id}/" + mark.group(1).replace("&amp;", "&"))
    page = marked.content.decode()
    assert 'id="tree-mark"' in page and f'id="node-{ids["a"]}" data-id' in page
    assert re.search(rf'class="node [^"]*marked[^"]*" id="node-{ids["a"]}"', page)
    other = re.search(rf'<a class="node-more" href="([^"#]+)#node-{ids["b"]}"', page)
    assert other is not None and f"mark={ids['a']}" in other.group(1)
    second = client.get(f"/sessions/{session.id}/" + other.group(1).replace("&amp;", "&"))
    link = re.search(r'<a class="compare-marked" href="([^"]+)"', second.content.decode())

    assert link is not None
    target = link.group(1).replace("&amp;", "&")
    assert target == f"/sessions/{session.id}/compare?a={ids['a']}&b={ids['b']}"
    assert client.get(target).status_code == 200
