"""Reads that views, the API and commands share. Nothing here writes."""

from __future__ import annotations

from django.db import connection

from projections.context import UNSET, SessionContext, UnsetType, build_session_context
from projections.records import EntryRecord
from sessions_app import store
from sessions_app.models import Session


def session_context(session: Session, leaf_id: str | None | UnsetType = UNSET) -> SessionContext:
    """The model context for a leaf of the session (its current leaf when not given).

    Pi's rules for the leaf: None is the empty context; an id that names no entry falls back
    to the session's last entry. Only the path from the root to the leaf is read.
    """
    if isinstance(leaf_id, UnsetType):
        leaf_id = session.leaf_entry_id
    if leaf_id is None:
        return build_session_context([], None)
    path = store.path_to_root(session.id, leaf_id)
    if not path:
        last = _last_entry(session)
        if last is None:
            return build_session_context([], None)
        path = store.path_to_root(session.id, last)
    return build_session_context(path, path[-1].id)


def _last_entry(session: Session) -> str | None:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT entry_id FROM sessions_app_entry WHERE session_id = %s ORDER BY seq DESC LIMIT 1",
            [str(session.id)],
        )
        row = cur.fetchone()
    return row[0] if row else None


def entry_records(session: Session) -> list[EntryRecord]:
    return store.entries_of(session.id)
