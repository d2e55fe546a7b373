"""Search through the API on a real Postgres: the entry found, ownership, any language, the
tail after the projector's checkpoint, a projector failing mid-batch, and odd queries."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.search_text import entry_parts
from sessions_app import services, store
from sessions_app.models import Entry, SearchDoc, Session
from sessions_app.projectors import project_pending, projector_lag, runner
from sessions_app.selectors import entry_search
from sessions_app.store import NewEvent
from tests.api.conftest import Api, body_of, user_msg

pytestmark = pytest.mark.django_db


def assistant_msg(text: str, *, model: str = "m-1", calls: list[dict] | None = None) -> NewEvent:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += [{"type": "toolCall", **call} for call in calls or []]
    message = {"role": "assistant", "content": content, "provider": "p", "model": model}
    return NewEvent("assistant/message", {"entry": {"type": "message", "message": message}})


def tool_result(text: str, *, tool: str, error: bool = False) -> NewEvent:
    message = {
        "role": "toolResult",
        "toolCallId": "c1",
        "toolName": tool,
        "content": [{"type": "text", "text": text}],
        "isError": error,
    }
    return NewEvent("tool/result", {"entry": {"type": "message", "message": message}})


def session_with(owner: Any, *events: NewEvent, title: str = "Notes") -> Session:
    session = services.session_create(owner=owner, title=title)
    session.refresh_from_db()
    store.append_events(session.id, session.last_seq, list(events))
    session.refresh_from_db()
    return session


def entry_ids(session: Session) -> list[str]:
    return list(
        Entry.objects.filter(session=session).order_by("seq").values_list("entry_id", flat=True)
    )


def search(api: Api, q: str, **params: Any) -> Any:
    return api.get("/search?" + urlencode({"q": q, **params}))


def found(api: Api, q: str, **params: Any) -> list[dict[str, Any]]:
    response = search(api, q, **params)
    assert response.status_code == 200, response.content
    return body_of(response)["items"]


def test_search_finds_the_very_entry(alice: Any, as_alice: Api) -> None:
    session = session_with(
        alice,
        user_msg("What is the capital of France?"),
        assistant_msg("Paris has been the capital since 987."),
        user_msg("And the population of the city?"),
    )
    project_pending()
    ids = entry_ids(session)
    items = found(as_alice, "capital since")
    assert [(i["entry_id"], i["role"]) for i in items] == [(ids[1], "assistant")]
    hit = items[0]
    assert hit["session_id"] == str(session.id) and hit["session_title"] == "Notes"
    assert "capital" in hit["snippet"].lower() and hit["highlights"]
    assert f"leaf={ids[1]}" in hit["url"] and f"entry={ids[1]}" in hit["url"]
    # A phrase must occur as written; words each anywhere; prefixes find their words.
    assert found(as_alice, '"capital since"')[0]["entry_id"] == ids[1]
    assert found(as_alice, '"since capital"') == []
    assert [i["entry_id"] for i in found(as_alice, "popul*")] == [ids[2]]
    assert {i["entry_id"] for i in found(as_alice, "CAPITAL")} == {ids[0], ids[1]}


def test_another_users_entries_are_never_shown(
    alice: Any, bob: Any, as_alice: Api, as_bob: Api, as_carol: Api
) -> None:
    mine = session_with(alice, user_msg("the zebra crossing plan"))
    theirs = session_with(bob, user_msg("bob's zebra secrets"))
    unprojected = session_with(bob, user_msg("bob's zebra tail"))
    project_pending()  # everything but `unprojected`'s later append
    store.append_events(unprojected.id, unprojected.last_seq, [user_msg("more zebra, later")])
    assert {i["session_id"] for i in found(as_alice, "zebra")} == {str(mine.id)}
    assert {i["session_id"] for i in found(as_bob, "zebra")} == {
        str(theirs.id),
        str(unprojected.id),
    }
    # Staff read every session.
    assert len(found(as_carol, "zebra")) == 4
    # Naming another user's session is answered as if it did not exist.
    response = search(as_alice, "zebra", session=str(theirs.id))
    assert response.status_code == 404
    assert found(as_bob, "zebra", session=str(theirs.id))[0]["session_id"] == str(theirs.id)


def test_japanese_and_chinese_text_is_found(alice: Any, as_alice: Api) -> None:
    session = session_with(
        alice,
        user_msg("昨日は東京タワーに行きました。"),
        assistant_msg("我们明天去北京开会，然后回上海。"),
        user_msg("Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ text"),
    )
    project_pending()
    ids = entry_ids(session)
    assert [i["entry_id"] for i in found(as_alice, "東京タワー")] == [ids[0]]
    assert [i["entry_id"] for i in found(as_alice, "北京开会")] == [ids[1]]
    # Two characters: fewer than a trigram, answered from the newest entries, and said so.
    response = search(as_alice, "上海")
    assert body_of(response)["scope"] == "recent"
    assert [i["entry_id"] for i in body_of(response)["items"]] == [ids[1]]
    # Full-width forms match their plain letters (NFKC).
    assert [i["entry_id"] for i in found(as_alice, "full-width abc")] == [ids[2]]


def test_a_message_is_found_right_after_it_is_written(alice: Any, as_alice: Api) -> None:
    session = session_with(alice, user_msg("an old note about kumquats"))
    project_pending()
    # The projector does not run: the new message is only in the log and the tail.
    store.append_events(session.id, session.last_seq, [user_msg("fresh kumquat jam")])
    assert projector_lag("search").events == 1
    items = found(as_alice, "kumquat")
    assert [i["snippet"] for i in items] == ["fresh kumquat jam", "an old note about kumquats"]
    project_pending()
    assert projector_lag("search").events == 0
    assert [i["snippet"] for i in found(as_alice, "kumquat")] == [
        "fresh kumquat jam",
        "an old note about kumquats",
    ]


def test_filters_role_tool_errors_model_session_and_dates(alice: Any, as_alice: Api) -> None:
    call = {"id": "c1", "name": "bash", "arguments": {"command": "make widget"}}
    session = session_with(
        alice,
        user_msg("build the widget"),
        assistant_msg("building the widget", model="big-model", calls=[call]),
        tool_result("widget: make failed", tool="bash", error=True),
        tool_result("widget listing", tool="ls"),
    )
    other = session_with(alice, user_msg("another widget"))
    project_pending()
    ids = entry_ids(session)
    assert {i["role"] for i in found(as_alice, "widget")} == {
        "user",
        "assistant",
        "toolCall",
        "toolResult",
    }
    calls = found(as_alice, "widget", role="toolCall")
    assert [(i["entry_id"], i["tool_name"]) for i in calls] == [(ids[1], "bash")]
    errors = found(as_alice, "widget", errors="true")
    assert [(i["entry_id"], i["is_error"]) for i in errors] == [(ids[2], True)]
    assert [i["entry_id"] for i in found(as_alice, "widget", tool="ls")] == [ids[3]]
    assert {i["entry_id"] for i in found(as_alice, "widget", model="big-model")} == {ids[1]}
    assert {i["session_id"] for i in found(as_alice, "widget", session=str(other.id))} == {
        str(other.id)
    }
    assert found(as_alice, "widget", since="2999-01-01T00:00:00Z") == []
    assert len(found(as_alice, "widget", until="2999-01-01T00:00:00Z")) == 6
    assert search(as_alice, "widget", role="wizard").status_code == 400


def test_results_page_with_a_cursor_without_gaps_or_repeats(alice: Any, as_alice: Api) -> None:
    session = session_with(alice, *[user_msg(f"pelican number {n}") for n in range(25)])
    project_pending()
    store.append_events(
        session.id, session.last_seq, [user_msg(f"pelican number {n}") for n in range(25, 30)]
    )
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        params = {"limit": "7", **({"cursor": cursor} if cursor else {})}
        body = body_of(search(as_alice, "pelican", **params))
        seen += [i["snippet"] for i in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(f"pelican number {n}" for n in range(30))
    assert len(seen) == len(set(seen))
    assert search(as_alice, "pelican", cursor="not-a-cursor").status_code == 400


@pytest.mark.parametrize("scan", [0, 4, 10_000])
def test_reading_the_newest_rows_first_finds_what_the_trigram_index_finds(
    alice: Any, as_alice: Api, monkeypatch: pytest.MonkeyPatch, scan: int
) -> None:
    # 0: every page from the trigram index; 4: the newest rows first, then the index;
    # 10,000: every page among the newest rows.
    events = []
    for n in range(24):
        text = f"heron {n}" if n % 3 else f"heron and egret {n}"
        events.append(user_msg(text) if n % 2 else assistant_msg(text))
    session_with(alice, *events)
    project_pending()
    monkeypatch.setattr(entry_search, "SCAN_MAX", scan)

    def pages(q: str, **params: Any) -> list[str]:
        seen: list[str] = []
        cursor: str | None = None
        while True:
            body = body_of(
                search(as_alice, q, limit="3", **params, **({"cursor": cursor} if cursor else {}))
            )
            seen += [i["snippet"] for i in body["items"]]
            cursor = body["next_cursor"]
            if cursor is None:
                return seen

    assert pages("heron") == [
        f"heron {n}" if n % 3 else f"heron and egret {n}" for n in reversed(range(24))
    ]
    assert pages("egret", role="user") == [f"heron and egret {n}" for n in (21, 15, 9, 3)]


def test_a_projector_failing_mid_batch_resumes_without_a_gap_or_a_duplicate(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = [
        session_with(alice, *[user_msg(f"s{k} message {n}") for n in range(30)]) for k in range(4)
    ]
    calls = {"n": 0}

    def fail_on_second() -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("killed between two writes")

    monkeypatch.setattr(runner, "between_writes", fail_on_second)
    with pytest.raises(RuntimeError):
        project_pending()
    # The whole batch rolled back: no output and no checkpoint of the first session either.
    assert SearchDoc.objects.count() == 0
    assert projector_lag("search").events == sum(s.last_seq + 1 for s in sessions)
    monkeypatch.setattr(runner, "between_writes", None)
    project_pending()
    expected = {
        (e.session_id, e.seq, p.part)
        for e in Entry.objects.filter(session__in=sessions)
        for p in entry_parts(e.data)
    }
    stored = list(SearchDoc.objects.values_list("session_id", "seq", "part"))
    assert len(stored) == len(set(stored)) == len(expected) == 120
    assert set(stored) == expected
    assert projector_lag("search").events == 0


ODD = [
    "",
    " ",
    '"',
    '""',
    '"unbalanced phrase',
    "%",
    "_",
    "\\",
    "%_\\",
    ".*[(",
    "a" * 500,
    "a" * 501,
    "x " * 9,
    "é́́́",
    "\x00",
    "*",
    "'; DROP TABLE x; --",
    "🙂🙂🙂",
]


@pytest.mark.parametrize("q", ODD)
def test_odd_queries_get_200_or_a_clear_4xx(alice: Any, as_alice: Api, q: str) -> None:
    session_with(alice, user_msg("50% of a_b\\c"))
    project_pending()
    response = search(as_alice, q)
    assert response.status_code in (200, 400, 422), response.content
    body = body_of(response)
    assert ("items" in body) if response.status_code == 200 else body["detail"]


def test_like_wildcards_are_matched_literally(alice: Any, as_alice: Api) -> None:
    session_with(alice, user_msg("50% of a_b\\c"), user_msg("500 of aXb"))
    project_pending()
    assert [i["snippet"] for i in found(as_alice, "0% of a_b\\c")] == ["50% of a_b\\c"]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(q=st.text(min_size=0, max_size=40))
def test_any_query_string_is_answered_without_a_server_error(as_alice: Api, q: str) -> None:
    response = search(as_alice, q)
    assert response.status_code in (200, 400, 422)


def test_the_search_page_escapes_snippets_and_marks_the_matches(alice: Any, bob: Any) -> None:
    from django.test import Client

    session_with(alice, user_msg("<script>alert(1)</script> the <b>okapi</b> & friends"))
    session_with(bob, user_msg("bob's okapi"))
    project_pending()
    client = Client()
    client.force_login(alice)
    page = client.get("/search?q=okapi")
    html = page.content.decode()
    assert page.status_code == 200
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "&lt;b&gt;<mark>okapi</mark>&lt;/b&gt; &amp; friends" in html
    assert "bob&#x27;s" not in html and "bob's okapi" not in html
    assert client.get("/search?q=%00").status_code == 400
    assert client.get("/search?q=" + "x" * 501).status_code == 400
    assert client.get("/search?q=okapi&since=someday").status_code == 400
    anonymous = Client().get("/search?q=okapi")
    assert anonymous.status_code == 302
