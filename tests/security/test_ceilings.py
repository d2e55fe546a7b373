"""Every answer has a ceiling, through daphne with the default settings: a session whose path
holds ~10.8 MB (twelve messages of 900 KB, past the 8 MiB of `STRAND_WHOLE_READ_BYTES`).

- `GET /api/sessions/{id}/context` and the comparison of two of its branches answer 413 with
  what to read instead, before the window is read (four in parallel leave the server's
  memory as it was: they once answered 80 MB each and 1.57 GB stayed resident);
- the page's context tab says so, the chat's `?all=1` draws one ceiling's worth and links
  to the entries above, and the tree (`?tree=1`, and the page's own) holds a line of each
  entry, however large, read a page at a time;
- another user is served meanwhile.

The whole tree (`?tree=1`) is a window that reads on, near the branch past TREE_FULL_LIMIT
entries: checked in-process with small limits, since the 200k-entry import that once drew
89 MB takes minutes to make.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from django.test import Client

from sessions_app import services, store
from sessions_app.models import Entry, Session
from sessions_app.services import tokens
from tests.api.conftest import user_msg
from tests.api.test_page_bytes import filled
from tests.security.daphne_child import port_for, resident_kb, serving
from tests.web.tree_reading import read_with_htmx

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1024 * 1024
CEILING = 8 * MB  # STRAND_WHOLE_READ_BYTES's default
MESSAGE = 900_000
COUNT = 12  # 10.8 MB of messages on one path
GROWTH_KB = 64 * 1024  # four refused reads may leave a server this much larger, at most


@pytest.fixture
def heavy(alice: Any) -> Session:
    return filled(alice, COUNT, MESSAGE)


@pytest.fixture
def server(alice: Any, bob: Any) -> Iterator[Any]:
    with serving(port_for(1)) as process:
        process.port = port_for(1)  # type: ignore[attr-defined]
        yield process


def bearer(user: Any) -> dict[str, str]:
    _, token = tokens.token_create(user, "ceilings")
    return {"Authorization": f"Bearer {token}"}


def get(server: Any, path: str, headers: dict[str, str]) -> requests.Response:
    return requests.get(f"http://127.0.0.1:{server.port}{path}", headers=headers, timeout=60)


def signed_in(server: Any, username: str) -> requests.Session:
    http = requests.Session()
    base = f"http://127.0.0.1:{server.port}"
    http.get(f"{base}/accounts/login/", timeout=30)
    answer = http.post(
        f"{base}/accounts/login/",
        data={
            "username": username,
            "password": f"{username}-pass-1234",
            "csrfmiddlewaretoken": http.cookies["csrftoken"],
        },
        headers={"Referer": f"{base}/accounts/login/"},
        allow_redirects=False,
        timeout=30,
    )
    assert answer.status_code == 302
    return http


def test_the_context_api_refuses_a_window_past_the_ceiling(
    server: Any, heavy: Session, alice: Any, bob: Any
) -> None:
    alices, bobs = bearer(alice), bearer(bob)
    path = f"/api/sessions/{heavy.id}/context"
    get(server, path, alices)  # loads what the refusal needs, before measuring
    before = resident_kb(server.pid)

    answers: list[requests.Response] = []
    threads = [
        threading.Thread(target=lambda: answers.append(get(server, path, alices))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    me = get(server, "/api/me", bobs)  # another user, meanwhile
    for thread in threads:
        thread.join()

    assert me.status_code == 200 and me.json()["username"] == "bob"
    assert len(answers) == 4
    for answer in answers:
        assert answer.status_code == 413 and len(answer.content) < 2000
        refusal = answer.json()
        assert refusal["error"] == "too_large"
        assert "8.0 MB" in refusal["detail"] and "older_cursor" in refusal["detail"]
    assert resident_kb(server.pid) - before < GROWTH_KB

    # What the refusal says to read instead reads the whole path, a window at a time.
    chat = get(server, f"/api/sessions/{heavy.id}/views/chat", alices).json()
    seen, cursor = COUNT - chat["entries_above"], chat["older_cursor"]
    while cursor:
        chat = get(server, f"/api/sessions/{heavy.id}/views/chat?cursor={cursor}", alices).json()
        seen, cursor = COUNT - chat["entries_above"], chat["older_cursor"]
    assert seen == COUNT


def test_a_context_within_the_ceiling_is_answered_whole(server: Any, alice: Any) -> None:
    session = filled(alice, 3, MESSAGE)
    answer = get(server, f"/api/sessions/{session.id}/context", bearer(alice))
    assert answer.status_code == 200
    assert len(answer.json()["messages"]) == 3


def test_comparing_branches_past_the_ceiling_is_refused(
    server: Any, heavy: Session, alice: Any
) -> None:
    fork_at = Entry.objects.filter(session=heavy).order_by("-seq")[1]
    services.session_move_leaf(session=heavy, to=fork_at.entry_id)
    heavy.refresh_from_db()
    store.append_events(heavy.id, heavy.last_seq, [user_msg("a side branch")])
    heavy.refresh_from_db()
    last = Entry.objects.filter(session=heavy).order_by("-seq")
    a, b = last[0].entry_id, last[1].entry_id

    answer = get(server, f"/api/sessions/{heavy.id}/compare?a={a}&b={b}", bearer(alice))

    assert answer.status_code == 413 and answer.json()["error"] == "too_large"


def test_the_pages_whole_reads_stop_at_the_ceiling(
    server: Any, heavy: Session, alice: Any, bob: Any
) -> None:
    http = signed_in(server, "alice")
    base = f"http://127.0.0.1:{server.port}/sessions/{heavy.id}/"
    bobs = bearer(bob)

    context = http.get(base + "?view=context", timeout=60)
    assert context.status_code == 200 and len(context.content) < MB
    assert "more than 8.0 MB of stored data" in context.text

    everything = http.get(base + "?all=1", timeout=60)
    assert get(server, "/api/me", bobs).status_code == 200
    assert everything.status_code == 200
    assert len(everything.content) < CEILING + MB
    shown = everything.text.count('class="msg user')
    assert 0 < shown < COUNT
    link = re.search(r'id="chat-ceiling">.*?href="([^"]+)"', everything.text, re.S)
    assert link is not None and "leaf=" in link.group(1)
    above = http.get(
        f"http://127.0.0.1:{server.port}" + link.group(1).replace("&amp;", "&"), timeout=60
    )
    assert above.status_code == 200 and len(above.content) < CEILING + MB
    assert f"message {COUNT - shown - 1} " in above.text  # the entry just above the window

    # The tree holds a line of each entry, whatever its size: drawn whole, in a few KB.
    tree = http.get(base + "?tree=1", timeout=60)
    assert tree.status_code == 200 and len(tree.content) < MB
    assert tree.text.count('class="node ') == COUNT

    plain = http.get(base, timeout=60)  # the default page: one page budget of messages
    assert plain.status_code == 200 and len(plain.content) < 3 * MB


def test_the_whole_tree_of_a_large_session_is_a_window_that_reads_on(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessions_app.selectors import tree as tree_selectors

    monkeypatch.setattr(tree_selectors, "TREE_FULL_LIMIT", 10)
    monkeypatch.setattr(tree_selectors, "TREE_ROWS", 10)
    session = services.session_create(owner=alice, title="many entries")
    store.append_events(session.id, session.last_seq, [user_msg(f"m{i}") for i in range(30)])
    client = Client()
    client.force_login(alice)

    html = client.get(f"/sessions/{session.id}/?tree=1").content.decode()

    tree = html[html.index('id="tree"') : html.index('id="view"')]
    assert tree.count('class="node ') == 5  # the path's last TREE_ROWS/2 entries
    assert "25 earlier entries of this branch" in tree and 'data-tree-load="previous"' in tree
    whole = read_with_htmx(client, session)
    assert len(whole.ids) == len(set(whole.ids)) == 30
