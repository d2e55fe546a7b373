"""The reads the runtime makes, through `sessions_app.agent`'s log adapter (its
`runtime.ports.SessionLog`), that no door makes: a session's head and what its next turn
runs with, events of some types, one entry, the whole path above a leaf, and the sessions
whose latest turn or a background job is still open (for crash recovery), and a session's
jobs cut to what the job tools read. The kept window of a leaf is
`context.kept_window`; the newest event of some types is `events.latest_event`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from projections.records import EntryRecord, EventRecord
from runtime.ports import JOB_COMMAND_SHOWN, JobFact
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
        .only("preset", "cwd", "owner", "origin")
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


def job_facts(session_id: SessionId) -> list[JobFact]:
    """The session's background jobs' starts and ends, oldest first, without their output."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT seq, type, data->>'job_id', turn, left(data->>'command', %s), "
            "data->>'reason', (data->>'exit_code')::int, (data->>'signal')::int "
            "FROM sessions_app_event "
            "WHERE session_id = %s AND type IN ('job/started', 'job/ended') ORDER BY seq",
            [JOB_COMMAND_SHOWN, str(session_id)],
        )
        return [
            JobFact(seq, kind, job_id or "", turn, command or "", reason, _int(code), _int(sig))
            for seq, kind, job_id, turn, command, reason, code, sig in cur.fetchall()
        ]


def job_ended(session_id: SessionId, job_id: str) -> EventRecord | None:
    """One job's `job/ended`, output and all."""
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {_COLUMNS} FROM sessions_app_event WHERE session_id = %s "
            "AND type = 'job/ended' AND data->>'job_id' = %s ORDER BY seq LIMIT 1",
            [str(session_id), job_id],
        )
        found = records(cur.fetchall())
    return found[0] if found else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
