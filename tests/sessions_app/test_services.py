from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

from sessions_app import services, store
from sessions_app.errors import DomainError
from sessions_app.models import Entry, Event, Session, SessionDeletion
from sessions_app.store import NewEvent
from tests.sessions_app.test_store import user_msg


def label(target: str, text: str) -> NewEvent:
    return NewEvent("entry/label", {"entry": {"type": "label", "targetId": target, "label": text}})


@pytest.mark.django_db
def test_move_leaf_records_from_and_to(alice):
    s = services.session_create(owner=alice)
    a, b = store.append_events(s.id, 0, [user_msg("a"), user_msg("b")]).entry_ids
    services.session_move_leaf(session=s, to=a)
    s.refresh_from_db()
    assert s.leaf_entry_id == a
    moved = store.events_after(s.id, 2)[0]
    assert moved.type == "leaf/moved"
    assert dict(moved.data) == {"from": b, "to": a, "reason": "navigate"}
    services.session_move_leaf(session=s, to=None)
    s.refresh_from_db()
    assert s.leaf_entry_id is None
    c = store.append_events(s.id, s.last_seq, [user_msg("new root")]).entry_ids[0]
    assert Entry.objects.get(session=s, entry_id=c).parent_id is None


@pytest.mark.django_db
def test_move_leaf_to_unknown_entry_is_refused(alice):
    s = services.session_create(owner=alice)
    with pytest.raises(DomainError, match="not an entry"):
        services.session_move_leaf(session=s, to="00000000")


@pytest.mark.django_db
def test_fork_copies_the_root_to_entry_path_with_labels(alice, bob):
    s = services.session_create(owner=alice, title="origin")
    a, b, c = store.append_events(s.id, 0, [user_msg("a"), user_msg("b"), user_msg("c")]).entry_ids
    store.append_events(s.id, 3, [label(a, "start")])
    fork = services.session_fork(session=s, entry_id=b, owner=alice)
    assert fork.parent_id == s.id and fork.fork_point == b
    created = store.events_after(fork.id, -1, 1)[0]
    assert created.data["source"] == "fork" and created.data["parent_session"] == str(s.id)
    entries = store.entries_of(fork.id)
    assert [e.id for e in entries[:2]] == [a, b]
    assert entries[2].type == "label" and entries[2].data["targetId"] == a
    assert entries[2].data["label"] == "start"
    assert fork.leaf_entry_id == entries[2].id
    # The origin is untouched.
    assert [e.id for e in store.path_to_root(s.id, c)] == [a, b, c]


@pytest.mark.django_db
def test_fork_of_unknown_entry_is_refused(alice):
    s = services.session_create(owner=alice)
    with pytest.raises(DomainError, match="not an entry"):
        services.session_fork(session=s, entry_id="ffffffff", owner=alice)
    assert Session.objects.count() == 1


@pytest.mark.django_db
def test_delete_removes_one_session_and_audits_it(alice, bob):
    keep = services.session_create(owner=alice, title="keep")
    store.append_events(keep.id, 0, [user_msg("stay")])
    gone = services.session_create(owner=alice, title="gone")
    a = store.append_events(gone.id, 0, [user_msg("bye")]).entry_ids[0]
    child = services.session_fork(session=gone, entry_id=a, owner=alice)
    services.session_delete(session=gone, by=bob)
    assert not Session.objects.filter(id=gone.id).exists()
    assert not Event.objects.filter(session_id=gone.id).exists()
    assert Event.objects.filter(session=keep).count() == 2
    child.refresh_from_db()
    assert child.parent_id is None
    audit = SessionDeletion.objects.get(session_id=gone.id)
    assert (audit.title, audit.deleted_by, audit.event_count) == ("gone", "bob", 2)
    # The guard is back in force for everything else.
    with pytest.raises(Exception, match="append-only"), connection.cursor() as cur:
        cur.execute("DELETE FROM sessions_app_event WHERE session_id = %s", [str(keep.id)])


@pytest.mark.django_db
def test_rename_is_an_event_and_sets_the_title(alice):
    s = services.session_create(owner=alice, title="old")
    services.session_rename(session=s, title="  new  ")
    assert s.title == "new"
    assert store.events_after(s.id)[-1].type == "session/renamed"
    with pytest.raises(DomainError):
        services.session_rename(session=s, title="   ")


@pytest.mark.django_db
def test_models_and_migrations_agree():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


@pytest.mark.django_db(transaction=True)
def test_migrations_apply_to_an_empty_database():
    call_command("migrate", "sessions_app", "zero", verbosity=0)
    with connection.cursor() as cur:
        cur.execute("SELECT to_regclass('sessions_app_event')")
        assert cur.fetchone()[0] is None
    call_command("migrate", verbosity=0)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'sessions_app_%%_append_only'"
        )
        assert cur.fetchone()[0] == 2
