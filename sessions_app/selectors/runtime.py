"""The reads the runtime makes, through `sessions_app.agent`'s log adapter (its
`runtime.ports.SessionLog`), that no door makes: a session's head and what its next turn
runs with, events of some types, one entry, the whole path above a leaf, and the sessions
whose latest turn is still open (for crash recovery). The kept window of a leaf is
`context.kept_window`; the newest event of some types is `events.latest_event`."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection

from projections.records import EntryRecord, EventRecord
from sessions_app import store
from sessions_app.models import Session
from sessions_app.selectors.events import _COLUMNS, SessionId, records


def session_head(session_id: SessionId) -> tuple[int, str | None] | None:
    """The session's last seq and current leaf; None for no such session."""
    row = Session.objects.filter(id=session_id).values_list("last_seq", "leaf_entry_id").first()
    return None if row is None else (int(row[0]), row[1])


def session_for_turn(session_id: SessionId) -> Session | None:
    """The session with what its next turn is set up from: its preset's name, its working
    directory and its owner (whose folders that directory must lie in)."""
    return (
        Session.objects.filter(id=session_id)
        .select_related("owner")
        .only("preset", "cwd", "owner")
        .first()
    )


def events_of_types(
    session_id: SessionId, types: Sequence[str], after_seq: int = -1
) -> list[EventRecord]:
    """Every event of one of `types` after `after_seq`, oldest first."""
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {_COLUMNS} FROM sessions_app_event "
            "WHERE session_id = %s AND type = ANY(%s) AND seq > %s ORDER BY seq",
            [str(session_id), list(types), after_seq],
        )
        return records(cur.fetchall())


def entry(session_id: SessionId, entry_id: str) -> EntryRecord | None:
    found = store.entries_by_id(session_id, [entry_id])
    return found[0] if found else None


def path(session_id: SessionId, leaf_id: str) -> list[EntryRecord]:
    """Root → `leaf_id` (empty for an unknown leaf)."""
    return store.path_to_root(session_id, leaf_id)


def sessions_with_open_turn() -> list[str]:
    """Every session whose latest turn marker is a `turn/start`."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT session_id FROM (
                SELECT DISTINCT ON (session_id) session_id, type FROM sessions_app_event
                WHERE type IN ('turn/start', 'turn/end') ORDER BY session_id, seq DESC
            ) last WHERE type = 'turn/start'
            """
        )
        return [str(row[0]) for row in cur.fetchall()]


def sessions_with_open_jobs() -> list[str]:
    """Every session with a background job that started and has not ended."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT DISTINCT started.session_id FROM sessions_app_event started
            WHERE started.type = 'job/started' AND NOT EXISTS (
                SELECT 1 FROM sessions_app_event ended
                WHERE ended.session_id = started.session_id AND ended.type = 'job/ended'
                  AND ended.data->>'job_id' = started.data->>'job_id'
            )
            """
        )
        return [str(row[0]) for row in cur.fetchall()]
