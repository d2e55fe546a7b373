"""GET /api/sessions/{id}/compare: two branches from their common ancestor, read a window
at a time, through the API's door."""

from __future__ import annotations

from typing import Any

import pytest

from sessions_app import services, store
from sessions_app.models import Session
from sessions_app.store import NewEvent
from tests.api.conftest import Api, body_of

pytestmark = pytest.mark.django_db(transaction=True)


def message(role: str, text: str, turn: int, **extra: Any) -> NewEvent:
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    body: dict[str, Any] = {"role": role, "content": content, **extra}
    kind = "user/message" if role == "user" else "assistant/message"
    return NewEvent(kind, {"entry": {"type": "message", "message": body}}, turn=turn)


def turn(n: int, question: str, answer: str, reason: str = "completed") -> list[NewEvent]:
    usage = {"input": 10 * n, "output": n, "totalTokens": 11 * n, "cost": {"total": 0.5}}
    return [
        NewEvent("turn/start", {"turn": n}, turn=n),
        message("user", question, n),
        message("assistant", answer, n, usage=usage),
        NewEvent("turn/end", {"turn": n, "reason": reason}, turn=n),
    ]


def answer(response: Any) -> tuple[int, Any]:
    return response.status_code, body_of(response)


def append(session: Session, events: list[NewEvent]) -> list[str]:
    session.refresh_from_db()
    ids = store.append_events(session.id, session.last_seq, events).entry_ids
    session.refresh_from_db()
    return list(ids)


@pytest.fixture
def two_branches(alice: Any) -> tuple[Session, dict[str, str]]:
    """One shared turn, then a branch A of five turns and a branch B of one."""
    session = services.session_create(owner=alice, title="two tries")
    _, shared = append(session, turn(1, "the question", "a first look"))
    a_ids = append(
        session,
        [e for n in range(2, 7) for e in turn(n, f"A question {n}", f"A <b>answer</b> {n}")],
    )
    moved = [NewEvent("leaf/moved", {"to": shared, "reason": "navigate"})]
    b_ids = append(session, moved + turn(7, "B question", "B answer", "interrupted"))
    return session, {"ancestor": shared, "a": a_ids[-1], "b": b_ids[-1]}


def test_compare_names_the_ancestor_and_aligns_both_branches(
    as_alice: Api, two_branches: tuple[Session, dict[str, str]]
) -> None:
    session, ids = two_branches

    status, body = answer(
        as_alice.get(f"/sessions/{session.id}/compare?a={ids['a']}&b={ids['b']}&limit=3")
    )

    assert status == 200
    assert body["ancestor"]["entry_id"] == ids["ancestor"]
    assert body["total_rows"] == 10 and body["offset"] == 0
    rows = body["rows"]
    assert [(r["a"]["kind"], r["b"] and r["b"]["kind"]) for r in rows] == [
        ("user", "user"),
        ("assistant", "assistant"),
        ("user", None),
    ]
    assert rows[1]["a"]["text"] == "A <b>answer</b> 2"
    assert body["totals_a"]["responses"] == 5 and body["totals_b"]["responses"] == 1
    assert body["totals_a"]["tokens"] == 11 * (2 + 3 + 4 + 5 + 6)
    assert body["totals_b"]["interrupted_turns"] == 1 and body["totals_a"]["interrupted_turns"] == 0
    assert body["context"]["shared"] == 2
    assert body["context"]["token_delta"] < 0


def test_the_more_cursor_reads_on_to_the_end(
    as_alice: Api, two_branches: tuple[Session, dict[str, str]]
) -> None:
    session, ids = two_branches
    base = f"/sessions/{session.id}/compare?a={ids['a']}&b={ids['b']}&limit=4"

    seen: list[int] = []
    cursor: str | None = None
    while True:
        status, body = answer(as_alice.get(base + (f"&cursor={cursor}" if cursor else "")))
        assert status == 200
        seen += [row["index"] for row in body["rows"]]
        cursor = body["more_cursor"]
        if cursor is None:
            break

    assert seen == list(range(10))


def test_unknown_entries_and_foreign_cursors_are_refused(
    as_alice: Api, two_branches: tuple[Session, dict[str, str]]
) -> None:
    session, ids = two_branches
    base = f"/sessions/{session.id}/compare"

    unknown_status, unknown = answer(as_alice.get(f"{base}?a={ids['a']}&b=nosuchentry"))
    missing_status, missing = answer(as_alice.get(f"{base}?a={ids['a']}"))
    _, first = answer(as_alice.get(f"{base}?a={ids['a']}&b={ids['b']}&limit=2"))
    foreign_status, foreign = answer(
        as_alice.get(f"{base}?a={ids['b']}&b={ids['a']}&cursor={first['more_cursor']}")
    )
    junk_status, junk = answer(as_alice.get(f"{base}?a={ids['a']}&b={ids['b']}&cursor=junk"))

    assert unknown_status in (400, 404) and "error" in unknown and "detail" in unknown
    assert missing_status in (400, 422) and "error" in missing
    assert foreign_status in (400, 422) and "error" in foreign
    assert junk_status in (400, 422) and "error" in junk


def test_a_branch_compared_with_its_own_ancestor(
    as_alice: Api, two_branches: tuple[Session, dict[str, str]]
) -> None:
    session, ids = two_branches

    status, body = answer(
        as_alice.get(f"/sessions/{session.id}/compare?a={ids['ancestor']}&b={ids['b']}")
    )

    assert status == 200
    assert body["ancestor"]["entry_id"] == ids["ancestor"]
    assert [(r["a"], r["b"]["kind"]) for r in body["rows"]] == [(None, "user"), (None, "assistant")]
    assert [c["kind"] for c in body["context"]["changes"]] == ["added", "added"]


def test_a_compacted_branch_is_compared_from_its_kept_window(
    as_alice: Api, two_branches: tuple[Session, dict[str, str]]
) -> None:
    session, ids = two_branches
    compaction = {
        "type": "compaction",
        "summary": "A tried five times",
        "firstKeptEntryId": ids["a"],
        "tokensBefore": 500,
    }
    moved = NewEvent("leaf/moved", {"to": ids["a"], "reason": "navigate"})
    (compacted,) = append(session, [moved, NewEvent("entry/compaction", {"entry": compaction})])

    status, body = answer(
        as_alice.get(f"/sessions/{session.id}/compare?a={compacted}&b={ids['b']}&limit=20")
    )

    assert status == 200
    assert body["rows"][-1]["a"]["kind"] == "compaction"
    assert body["rows"][-1]["a"]["text"] == "A tried five times"
    # A's next context: the summary, then the kept entry; nothing is shared with B's.
    assert (body["context"]["messages_a"], body["context"]["shared"]) == (2, 0)
    assert body["context"]["messages_b"] == 4
