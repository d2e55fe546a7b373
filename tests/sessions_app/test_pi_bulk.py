"""The Pi import's COPY path (`store.bulk`): the rows it writes are those `strand_append`
writes for the same entries, it refuses what the append function refuses, and a file
refused anywhere, its last line included, leaves nothing behind."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction

from bench.pi import generate
from sessions_app import services, store
from sessions_app.errors import DomainError
from sessions_app.events import event_type_for_entry
from sessions_app.models import Entry, Event, Session, StorageUsage
from sessions_app.services import pi_io
from sessions_app.store import NewEvent
from sessions_app.store.bulk import ROWS_PER_COPY, BulkAppend

pytestmark = pytest.mark.django_db

ENTRY_COLUMNS = (
    "entry_id",
    "parent_id",
    "type",
    "timestamp",
    "seq",
    "depth",
    "path_compaction",
    "path_thinking",
    "path_model",
    "data",
)
EVENT_COLUMNS = ("seq", "type", "schema_version", "entry_id", "turn", "step", "ignorable", "data")


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Pi file of more entries than one COPY sends: compactions, thinking changes, side
    branches with branch summaries, tool calls."""
    path = tmp_path_factory.mktemp("pi") / "big.jsonl"
    generate(path, 2 * ROWS_PER_COPY + 300, side_every=40)
    return path


def _entries_of(session: Session) -> list[tuple[Any, ...]]:
    return list(Entry.objects.filter(session=session).order_by("seq").values_list(*ENTRY_COLUMNS))


def _events_of(session: Session) -> list[tuple[Any, ...]]:
    return list(Event.objects.filter(session=session).order_by("seq").values_list(*EVENT_COLUMNS))


def _through_strand_append(alice: Any, path: Path) -> Session:
    """The same file written the way imports were before COPY: `append_events` batches,
    each through `strand_append`, in file order (the file has every parent first)."""
    with path.open("rb") as source:
        lines = [json.loads(line) for line in source if line.strip()]
    header, entries = lines[0], lines[1:]
    with transaction.atomic():
        session = services.session_create(
            owner=alice, title="appended", source="import:pi", pi_header=header
        )
        seq = session.last_seq
        events = [NewEvent(event_type_for_entry(e), {"entry": e}) for e in entries]
        for start in range(0, len(events), 500):
            seq = store.append_events(session.id, seq, events[start : start + 500]).last_seq
    session.refresh_from_db()
    return session


def test_copy_writes_the_rows_strand_append_writes(alice, big_file):
    with big_file.open("rb") as source:
        copied = pi_io.pi_import(source=source, owner=alice, name="copied").session
    appended = _through_strand_append(alice, big_file)
    assert _entries_of(copied) == _entries_of(appended)
    # The events after `session/created` (its own data names the session's title).
    assert _events_of(copied)[1:] == _events_of(appended)[1:]
    for field in ("last_seq", "leaf_entry_id", "message_count", "token_count"):
        assert getattr(copied, field) == getattr(appended, field), field
    assert copied.message_count > 0 and copied.token_count > 0
    # The bytes counted for the quota: the same JSON, measured as the store measures it.
    assert copied.stored_bytes == pytest.approx(appended.stored_bytes, rel=0.001)
    usage = StorageUsage.objects.get(owner=alice).stored_bytes
    assert usage == copied.stored_bytes + appended.stored_bytes


def test_the_append_only_guard_holds_for_copied_rows(alice, big_file):
    with big_file.open("rb") as source:
        session = pi_io.pi_import(source=source, owner=alice).session
    for table in ("sessions_app_event", "sessions_app_entry"):
        with (
            pytest.raises(Exception, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cur,
        ):
            cur.execute(f"UPDATE {table} SET seq = seq WHERE session_id = %s", [session.id])


def _with_last_line(path: Path, line: dict[str, Any]) -> bytes:
    return path.read_bytes() + json.dumps(line).encode() + b"\n"


def _nothing_written(alice: Any, content: bytes) -> str:
    before = (
        Session.objects.count(),
        Event.objects.count(),
        Entry.objects.count(),
        list(StorageUsage.objects.filter(owner=alice).values_list("stored_bytes", flat=True)),
    )
    with pytest.raises(DomainError) as caught:
        pi_io.pi_import(source=io.BytesIO(content), owner=alice)
    after = (
        Session.objects.count(),
        Event.objects.count(),
        Entry.objects.count(),
        list(StorageUsage.objects.filter(owner=alice).values_list("stored_bytes", flat=True)),
    )
    assert after == before
    return str(caught.value)


BAD_LAST_LINES: dict[str, dict[str, Any]] = {
    "a role Pi has not": {"type": "message", "message": {"role": "oracle", "content": "?"}},
    "an id taken before": {"id": "00000001", "type": "message"},
    "a parent that is not a string": {"parentId": 7},
    "nested past the limit": {
        "type": "custom",
        "customType": "x",
        "data": [[[[[[[[[[[[1]]]]]]]]]]]],
    },
}


@pytest.mark.parametrize("name", sorted(BAD_LAST_LINES))
def test_a_bad_last_line_of_a_big_file_leaves_nothing(alice, big_file, settings, name):
    settings.STRAND_MAX_JSON_DEPTH = 10
    lines = sum(1 for _ in big_file.open("rb"))
    bad = {
        "type": "message",
        "id": "ffffffff",
        "parentId": "00000000",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": "last"},
        **BAD_LAST_LINES[name],
    }
    message = _nothing_written(alice, _with_last_line(big_file, bad))
    assert message.startswith(f"line {lines + 1}"), message


def test_an_import_past_the_quota_is_refused_whole(alice, big_file, settings):
    settings.STRAND_USER_QUOTA_BYTES = big_file.stat().st_size  # the rows take about twice
    message = _nothing_written(alice, big_file.read_bytes())
    assert "storage quota exceeded" in message


def test_ids_and_texts_with_copy_s_special_characters_come_back_as_written(alice):
    odd = "a\tb\\n\nc\r"
    header = {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/x"}
    entries = [
        {"type": "message", "id": odd, "parentId": None, "timestamp": "2026\t01",
         "message": {"role": "user", "content": "tab\there, back\\slash, quote\" \u2028 é"}},
        {"type": "message", "id": "child", "parentId": odd, "timestamp": "x",
         "message": {"role": "user", "content": "\\N"}},
    ]  # fmt: skip
    content = "\n".join(json.dumps(x) for x in [header, *entries]).encode() + b"\n"
    session = pi_io.pi_import(source=io.BytesIO(content), owner=alice).session
    stored = list(Entry.objects.filter(session=session).order_by("seq"))
    assert [e.entry_id for e in stored] == [odd, "child"]
    assert stored[1].parent_id == odd and stored[1].depth == 1
    assert stored[0].timestamp == "2026\t01"
    assert [e.data for e in stored] == entries
    exported = list(pi_io.pi_export_lines(session))[1:]
    assert [json.loads(line) for line in exported] == entries


# --- the bulk appender's own refusals ----------------------------------------------------


_LEAF = object()  # no parentId: the entry goes below the current leaf


def _user(entry_id: str, parent: str | None | object, **extra: Any) -> NewEvent:
    entry: dict[str, Any] = {"type": "message", "id": entry_id, "timestamp": "t"}
    if parent is not _LEAF:
        entry["parentId"] = parent
    entry["message"] = {"role": "user", "content": "hi"}
    return NewEvent("user/message", {"entry": entry, **extra})


def _bulk(session: Session, *events: NewEvent) -> store.AppendResult:
    with transaction.atomic(), BulkAppend(session.id, _last_seq(session)) as bulk:
        for event in events:
            bulk.add(event)
        return bulk.finish()


def _last_seq(session: Session) -> int:
    return Session.objects.get(id=session.id).last_seq


REFUSED: dict[str, tuple[list[NewEvent], str]] = {
    "a parent that is no entry": ([_user("a", "nowhere")], "is not an entry of this session"),
    "an id twice": ([_user("a", None), _user("a", None)], "appears twice"),
    "an orphan below an entry": (
        [_user("a", None), _user("b", "a", orphan=True)],
        "would close a parent cycle",
    ),
    "an entry an orphan waits for": (
        [_user("b", "a", orphan=True), _user("a", None)],
        "would close a parent cycle",
    ),
    "an event that adds no entry": ([NewEvent("turn/start", {"turn": 1})], "only entry events"),
    "an entry without an id": (
        [NewEvent("user/message", {"entry": {"type": "message", "message": {"role": "user"}}})],
        "names its id",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bulk_refuses_what_the_append_function_refuses(alice, name):
    events, reason = REFUSED[name]
    session = services.session_create(owner=alice, title="s")
    with pytest.raises(store.InvalidEvent, match=reason):
        _bulk(session, *events)
    assert not Entry.objects.filter(session=session).exists()
    assert Session.objects.get(id=session.id).last_seq == session.last_seq


def test_bulk_refuses_a_stale_expected_seq(alice):
    session = services.session_create(owner=alice, title="s")
    with pytest.raises(store.ConcurrencyError), transaction.atomic():
        BulkAppend(session.id, session.last_seq + 1)


def test_bulk_continues_below_stored_entries_and_the_function_after_it(alice):
    session = services.session_create(owner=alice, title="s")
    first = store.append_events(session.id, session.last_seq, [_user("a", None)])
    done = _bulk(session, _user("b", "a"), _user("c", _LEAF), _user("o", "gone", orphan=True))
    assert done.first_seq == first.last_seq + 1 and done.leaf_entry_id == "o"
    depths = dict(Entry.objects.filter(session=session).values_list("entry_id", "depth"))
    assert depths == {"a": 0, "b": 1, "c": 2, "o": 0}  # c hangs below the leaf, b
    # The orphan's missing parent stays missing for good: the append function refuses it.
    with pytest.raises(store.InvalidEvent, match="cycle"):
        store.append_events(session.id, done.last_seq, [_user("gone", None)])
    # And a bulk after it refuses it too, reading the stored orphan.
    with pytest.raises(store.InvalidEvent, match="cycle"):
        _bulk(session, _user("gone", None))


@pytest.mark.django_db(transaction=True)
def test_a_batch_refused_while_the_next_is_made_refuses_the_bulk(alice, monkeypatch):
    # An id the session already holds is refused by Postgres, on the sender's thread, as
    # the caller makes the next batch: the refusal reaches the caller, and nothing stays.
    from sessions_app.store import bulk

    monkeypatch.setattr(bulk, "ROWS_PER_COPY", 2)
    session = services.session_create(owner=alice, title="s")
    store.append_events(session.id, session.last_seq, [_user("a", None)])
    events = [_user("b", "a"), _user("a", "b"), _user("c", "b"), _user("d", "c"), _user("e", "d")]
    with pytest.raises(store.InvalidEvent, match="already exists in the session"):
        _bulk(session, *events)
    assert list(Entry.objects.filter(session=session).values_list("entry_id", flat=True)) == ["a"]
    assert Session.objects.get(id=session.id).leaf_entry_id == "a"


@pytest.mark.django_db(transaction=True)
def test_an_import_abandoned_mid_copy_leaves_nothing(alice, tmp_path, monkeypatch):
    # The reader stops (as a browser that goes away stops a streamed import) while a batch
    # is being sent: leaving waits for it, and the transaction then takes it back whole.
    from sessions_app.store import bulk

    monkeypatch.setattr(bulk, "ROWS_PER_COPY", 50)
    path = tmp_path / "abandoned.jsonl"
    generate(path, 3000, side_every=40)
    before = Session.objects.count()
    with path.open("rb") as source:
        steps = pi_io.pi_import_steps(source=source, owner=alice, name="abandoned")
        assert next(steps)[1] >= pi_io.PROGRESS_EVERY
        steps.close()
    assert Session.objects.count() == before
    assert not Entry.objects.filter(session__title="abandoned").exists()
    assert not Event.objects.filter(session__title="abandoned").exists()


@pytest.mark.django_db(transaction=True)
def test_bulk_tells_listeners_once_at_commit(alice):
    session = services.session_create(owner=alice, title="s")
    with connection.cursor() as cur:
        cur.execute(f"LISTEN {store.NOTIFY_CHANNEL}")
    done = _bulk(session, _user("a", None), _user("b", "a"))
    connection.ensure_connection()
    notices = list(connection.connection.notifies(timeout=0.5, stop_after=5))
    payloads = [n.payload for n in notices if n.payload.startswith(str(session.id))]
    assert payloads == [f"{session.id}:{done.last_seq}"]


def test_rows_are_sent_a_few_megabytes_at_a_time(alice, tmp_path, monkeypatch):
    from sessions_app.store import bulk

    path = tmp_path / "small.jsonl"
    generate(path, 120, side_every=40)
    sent: list[int] = []
    flush = bulk.BulkAppend.flush

    def counted(self: BulkAppend) -> None:
        sent.append(len(self._events))
        flush(self)

    monkeypatch.setattr(bulk, "BYTES_PER_COPY", 4096)  # a few entries' worth
    monkeypatch.setattr(bulk.BulkAppend, "flush", counted)
    with path.open("rb") as source:
        copied = pi_io.pi_import(source=source, owner=alice, name="copied").session
    assert len([n for n in sent if n]) > 10 and max(sent) < 10
    assert _entries_of(copied) == _entries_of(_through_strand_append(alice, path))
