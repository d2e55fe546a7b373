"""Entries of a session: whether one exists, and all of them (for the whole-session folds)."""

from __future__ import annotations

from projections.records import EntryRecord
from sessions_app import store
from sessions_app.models import Session


def entry_exists(session: Session, entry_id: str) -> bool:
    return bool(store.entries_by_id(session.id, [entry_id]))


def entry_records(session: Session) -> list[EntryRecord]:
    return store.entries_of(session.id)
