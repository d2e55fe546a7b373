from __future__ import annotations

import json
import threading
from uuid import uuid4

import pytest
from django.db import DatabaseError, connection, connections, transaction
from django.test import override_settings

from sessions_app import services, store
from sessions_app.models import Entry, Event, Session
from sessions_app.store import ConcurrencyError, InvalidEvent, NewEvent, TooLarge


def user_msg(text: str, **entry: object) -> NewEvent:
    return NewEvent(
        "user/message",
        {"entry": {"type": "message", "message": {"role": "user", "content": text}, **entry}},
    )


def snapshot(session: Session) -> tuple:
    session.refresh_from_db()
    return (
        session.last_seq,
        session.leaf_entry_id,
        list(Event.objects.filter(session=session).values_list("seq", "type", "data")),
        list(Entry.objects.filter(session=session).values_list("entry_id", "parent_id", "data")),
    )


@pytest.fixture
def session(alice):
    return services.session_create(owner=alice, title="t")


@pytest.mark.django_db
def test_session_starts_with_created_event_at_seq_zero(session):
    events = store.events_after(session.id)
    assert [(e.seq, e.type) for e in events] == [(0, "session/created")]
    assert session.last_seq == 0


@pytest.mark.django_db
def test_entry_parent_defaults_to_current_leaf_and_leaf_follows(session):
    first = store.append_events(session.id, 0, [user_msg("one")])
    second = store.append_events(session.id, 1, [user_msg("two")])
    session.refresh_from_db()
    a, b = first.entry_ids[0], second.entry_ids[0]
    assert session.leaf_entry_id == b
    entries = store.entries_of(session.id)
    assert [(e.id, e.parent_id) for e in entries] == [(a, None), (b, a)]
    assert entries[1].data["parentId"] == a
    assert len(a) == 8 and int(a, 16) >= 0
    # The event carries the completed entry, so the tree can be rebuilt from the log.
    assert store.events_after(session.id, 0)[0].data["entry"] == dict(entries[0].data)


@pytest.mark.django_db
def test_append_rejects_stale_expected_seq(session):
    store.append_events(session.id, 0, [user_msg("one")])
    before = snapshot(session)
    with pytest.raises(ConcurrencyError) as info:
        store.append_events(session.id, 0, [user_msg("late")])
    assert info.value.current_seq == 1
    assert snapshot(session) == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    "bad, message",
    [
        (NewEvent("nope/unknown", {}), "unknown event type"),
        (user_msg("x", parentId="deadbeef"), "not an entry of this session"),
        (
            NewEvent(
                "user/message", {"entry": {"type": "message", "message": {"role": "assistant"}}}
            ),
            "role",
        ),
        (NewEvent("turn/end", {"turn": 0, "reason": "exploded"}), "reason"),
        (
            NewEvent(
                "user/message",
                {"entry": {"type": "message", "message": {"role": "user", "content": {1, 2}}}},
            ),
            "not JSON",
        ),
        (
            NewEvent(
                "user/message",
                {
                    "entry": {
                        "type": "message",
                        "message": {"role": "user", "content": float("nan")},
                    }
                },
            ),
            "not JSON",
        ),
        (
            NewEvent(
                "user/message",
                {
                    "entry": {
                        "type": "message",
                        "message": {"role": "user", "content": [{"a": [1.5, float("-inf")]}]},
                    }
                },
            ),
            "not JSON",
        ),
        (
            NewEvent(
                "user/message",
                {"entry": {"type": "message", "message": {"role": "user", "content": uuid4()}}},
            ),
            "not JSON",
        ),
        (NewEvent("leaf/moved", {"to": "cafebabe"}), "not an entry"),
    ],
)
def test_bad_batch_is_refused_whole(session, bad, message):
    before = snapshot(session)
    with pytest.raises(InvalidEvent, match=message):
        store.append_events(session.id, 0, [user_msg("fine"), bad])
    assert snapshot(session) == before


@pytest.mark.django_db
def test_oversize_event_and_batch_are_refused(session):
    before = snapshot(session)
    with (
        override_settings(STRAND_MAX_EVENT_BYTES=1000),
        pytest.raises(TooLarge, match="over the limit"),
    ):
        store.append_events(session.id, 0, [user_msg("x" * 2000)])
    with override_settings(STRAND_MAX_BATCH=3), pytest.raises(TooLarge, match="batch of 4"):
        store.append_events(session.id, 0, [user_msg(str(i)) for i in range(4)])
    assert snapshot(session) == before


@pytest.mark.django_db
def test_default_event_size_limit_is_one_mebibyte(session):
    with pytest.raises(TooLarge):
        store.append_events(session.id, 0, [user_msg("x" * (1024 * 1024))])
    store.append_events(session.id, 0, [user_msg("x" * (1024 * 1024 - 200))])


@pytest.mark.django_db
def test_duplicate_entry_id_is_refused(session):
    store.append_events(session.id, 0, [user_msg("a", id="aaaaaaaa")])
    with pytest.raises(InvalidEvent, match="already exists"):
        store.append_events(session.id, 1, [user_msg("b", id="aaaaaaaa")])


@pytest.mark.django_db
def test_unknown_ignorable_event_is_stored_and_skipped_on_read(session):
    store.append_events(session.id, 0, [NewEvent("future/thing", {"x": 1}, ignorable=True)])
    assert [e.type for e in store.events_after(session.id)] == ["session/created"]
    assert Event.objects.filter(session=session, type="future/thing").count() == 1


@pytest.mark.django_db
def test_events_after_pages_by_seq(session):
    store.append_events(session.id, 0, [user_msg(str(i)) for i in range(10)])
    page = store.events_after(session.id, 3, 4)
    assert [e.seq for e in page] == [4, 5, 6, 7]


@pytest.mark.django_db
def test_path_to_root_follows_parents(session):
    r = store.append_events(session.id, 0, [user_msg("a"), user_msg("b"), user_msg("c")])
    a, b, c = r.entry_ids
    services.session_move_leaf(session=session, to=a)
    d = store.append_events(session.id, 4, [user_msg("d")]).entry_ids[0]
    assert [e.id for e in store.path_to_root(session.id, c)] == [a, b, c]
    assert [e.id for e in store.path_to_root(session.id, d)] == [a, d]
    assert store.path_to_root(session.id, "missing0") == []


@pytest.mark.django_db
def test_update_and_delete_are_refused_by_the_database(session):
    store.append_events(session.id, 0, [user_msg("a")])
    statements = [
        "UPDATE sessions_app_event SET type = 'x' WHERE session_id = %s",
        "DELETE FROM sessions_app_event WHERE session_id = %s",
        "UPDATE sessions_app_entry SET parent_id = 'x' WHERE session_id = %s",
        "DELETE FROM sessions_app_entry WHERE session_id = %s",
    ]
    for sql in statements:
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cur,
        ):
            cur.execute(sql, [str(session.id)])
    assert Event.objects.filter(session=session).count() == 2
    assert Entry.objects.filter(session=session).count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_are_gapless_and_tree_stays_valid(alice):
    session = services.session_create(owner=alice, title="race")
    threads, per_thread = 8, 200
    errors: list[BaseException] = []
    retries = [0] * threads

    def writer(index: int) -> None:
        try:
            for i in range(per_thread):
                while True:
                    current = Session.objects.values_list("last_seq", flat=True).get(id=session.id)
                    try:
                        store.append_events(session.id, current, [user_msg(f"{index}-{i}")])
                        break
                    except ConcurrencyError:
                        retries[index] += 1
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    pool = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors
    seqs = list(Event.objects.filter(session=session).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(threads * per_thread + 1))  # + session/created at 0
    entries = {e.id: e for e in store.entries_of(session.id)}
    assert len(entries) == threads * per_thread
    roots = [e for e in entries.values() if e.parent_id is None]
    assert len(roots) == 1
    assert all(e.parent_id is None or e.parent_id in entries for e in entries.values())
    # Every append chained onto the leaf it saw under the lock: one linear path.
    session.refresh_from_db()
    assert session.leaf_entry_id is not None
    assert len(store.path_to_root(session.id, session.leaf_entry_id)) == threads * per_thread


def _entry(kind: str, **fields: object) -> NewEvent:
    from sessions_app.events import event_type_for_entry

    entry = {"type": kind, **fields}
    return NewEvent(event_type_for_entry(entry), {"entry": entry})


@pytest.mark.django_db
def test_entries_record_the_nearest_compaction_thinking_and_model_on_their_path(session):
    assistant = {"role": "assistant", "content": [], "provider": "p", "model": "m"}
    ids = store.append_events(
        session.id,
        0,
        [
            user_msg("a"),
            _entry("thinking_level_change", thinkingLevel="high"),
            _entry("message", message=assistant),
            _entry("compaction", summary="s", firstKeptEntryId="x", tokensBefore=1),
            user_msg("b"),
        ],
    ).entry_ids
    a, think, reply, compaction, b = ids
    facts = {
        e.entry_id: (e.path_compaction, e.path_thinking, e.path_model)
        for e in Entry.objects.filter(session=session)
    }
    assert facts[a] == (None, None, None)
    assert facts[reply] == (None, think, reply)
    assert facts[b] == (compaction, think, reply)
    # A branch from before the thinking change does not inherit it.
    services.session_move_leaf(session=session, to=a)
    session.refresh_from_db()
    model = store.append_events(
        session.id, session.last_seq, [_entry("model_change", provider="p", modelId="n")]
    ).entry_ids[0]
    row = Entry.objects.get(session=session, entry_id=model)
    assert (row.path_compaction, row.path_thinking, row.path_model) == (None, None, model)
    assert row.depth == 1


def _stored(session: Session) -> tuple:
    session.refresh_from_db()
    entries = [
        (e.entry_id, e.parent_id, e.type, e.data, e.seq, e.depth)
        + (e.path_compaction, e.path_thinking, e.path_model)
        for e in Entry.objects.filter(session=session).order_by("seq")
    ]
    events = list(
        Event.objects.filter(session=session, seq__gt=0)
        .order_by("seq")
        .values_list("seq", "type", "schema_version", "data", "entry_id", "turn", "step")
    )
    # (stored_bytes is the JSON the store measured before the database filled in parent
    # ids: an entry whose parent another entry of its batch is, is measured with it.)
    counters = (
        session.last_seq,
        session.leaf_entry_id,
        session.message_count,
        session.token_count,
        session.title,
    )
    return entries, events, counters


@pytest.mark.django_db
def test_one_event_at_a_time_stores_what_one_batch_stores(alice):
    """strand_append reads and writes a batch of one its own way: the rows must not differ."""
    assistant = {
        "role": "assistant",
        "content": [{"type": "text", "text": "é ✓"}],
        "provider": "p",
        "model": "m",
        "usage": {"totalTokens": 7},
    }
    when = {"timestamp": "2026-01-01T00:00:00.000Z"}
    events = [
        user_msg("a", id="e0000001", **when),
        _entry("thinking_level_change", id="e0000002", thinkingLevel="high", **when),
        _entry("message", id="e0000003", message=assistant, **when),
        NewEvent("turn/start", {"turn": 1, "trigger": "message"}),
        _entry(
            "compaction",
            id="e0000004",
            summary="s",
            firstKeptEntryId="e0000003",
            tokensBefore=1,
            **when,
        ),
        NewEvent("leaf/moved", {"to": "e0000001", "reason": "navigate"}),
        user_msg("b", id="e0000005", **when),
        user_msg("c", id="e0000006", parentId="e0000003", **when),
        NewEvent("session/renamed", {"title": "renamed"}),
        NewEvent("leaf/moved", {"from": "e0000006", "to": None, "reason": "navigate"}),
        user_msg("root again", id="e0000007", **when),
    ]
    one_by_one = services.session_create(owner=alice, title="t")
    for event in events:
        one_by_one.refresh_from_db()
        store.append_events(one_by_one.id, one_by_one.last_seq, [event])
    batched = services.session_create(owner=alice, title="t")
    store.append_events(batched.id, 0, events)
    singles, batch = _stored(one_by_one), _stored(batched)
    assert singles == batch
    entries = {row[0]: row for row in batch[0]}
    assert entries["e0000005"][1] == "e0000001" and entries["e0000005"][5] == 1
    assert entries["e0000007"][1] is None and entries["e0000007"][5] == 0
    assert batch[2][1] == "e0000007" and batch[2][4] == "renamed"


@pytest.mark.django_db
def test_a_refused_event_alone_writes_nothing_and_says_why(session):
    store.append_events(session.id, 0, [user_msg("a", id="aaaaaaaa")])
    before = snapshot(session)
    refusals = [
        (user_msg("b", parentId="nope"), "is not an entry of this session"),
        (NewEvent("leaf/moved", {"to": "nope"}), "is not an entry of this session"),
        (NewEvent("leaf/moved", {"from": "zzzz", "to": None}), "'from' is"),
        (user_msg("c", id="aaaaaaaa"), "already exists"),
    ]
    for event, message in refusals:
        with pytest.raises(InvalidEvent, match=message):
            store.append_events(session.id, 1, [event])
        assert snapshot(session) == before
    with pytest.raises(ConcurrencyError):
        store.append_events(session.id, 0, [user_msg("d")])
    assert snapshot(session) == before


@pytest.mark.django_db
def test_append_many_writes_each_session_as_append_would(alice, session):
    other = services.session_create(owner=alice, title="u")
    results = store.append_events_many(
        [
            (session.id, 0, [user_msg("one"), user_msg("two")]),
            (other.id, 0, [user_msg("elsewhere")]),
            (session.id, 2, [user_msg("three")]),  # the same session again, after its batch
        ]
    )
    assert [(r.first_seq, r.last_seq) for r in results] == [(1, 2), (1, 1), (3, 3)]
    texts = [e.data["entry"]["message"]["content"] for e in store.events_after(session.id, 0)]
    assert texts == ["one", "two", "three"]
    entries = store.entries_of(session.id)
    assert [e.parent_id for e in entries] == [None, entries[0].id, entries[1].id]
    session.refresh_from_db()
    other.refresh_from_db()
    assert (session.last_seq, session.leaf_entry_id) == (3, results[2].entry_ids[0])
    assert (other.last_seq, other.message_count) == (1, 1)


@pytest.mark.django_db
def test_append_many_refuses_every_batch_when_one_is_stale(alice, session):
    other = services.session_create(owner=alice, title="u")
    before = snapshot(session), snapshot(other)
    with pytest.raises(ConcurrencyError):
        store.append_events_many(
            [(session.id, 0, [user_msg("one")]), (other.id, 5, [user_msg("stale")])]
        )
    assert (snapshot(session), snapshot(other)) == before


@pytest.mark.parametrize(
    "value",
    [
        {"a": "é ☃ \u2028 \x1f \t\n", "b": [1, -2, 2**63 - 1, True, None, 0.1, 1e16, -0.0]},
        {"deep": [[[{"x": ()}]]], "big": 2**70, "keys": {1: "int key", None: "none key"}},
        ["\ud800 lone surrogate"],
        {"s": type("Text", (str,), {})("a str subclass")},
    ],
)
def test_strict_json_is_the_standard_librarys(value):
    """The store's JSON (orjson where it writes the same) reads back as the standard
    library's does, whichever writes it."""
    ours = store._strict_dumps(value)
    theirs = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    assert json.loads(ours) == json.loads(theirs)
