"""The turns of a session: their numbers (all, or those of a branch), and the state of the
latest one (`projections.turns` folds it)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db import connection

from projections.records import EntryRecord, EventRecord
from projections.trace import DEFAULT_PAGE_TURNS
from projections.turns import (
    TURN_MARKERS,
    PendingApproval,
    TurnState,
    is_open,
    pending_approvals,
    turn_number,
    turn_state,
)
from sessions_app import store
from sessions_app.models import Event, Session
from sessions_app.selectors.events import (
    SessionId,
    events_of_turns,
    latest_event,
    records,
)
from sessions_app.turn_lock import turn_lock_key

# Entries at the end of a path searched first for its latest turns (a long path is then
# not walked to its root for the trace's latest page).
TURN_SCAN_ENTRIES = 2000


# --- the state of the latest turn -----------------------------------------------------------


def turn_lock_held(session_id: SessionId) -> bool:
    """Whether a live process holds the session's turn lock (a read: takes nothing)."""
    unsigned = turn_lock_key(str(session_id)) & 0xFFFFFFFFFFFFFFFF
    with connection.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s AND objid = %s AND objsubid = 1 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [unsigned >> 32, unsigned & 0xFFFFFFFF],
        )
        return cur.fetchone() is not None


def advisory_locks_held(keys: Sequence[int]) -> int:
    """How many of the advisory locks `keys` live processes hold (a read: takes nothing)."""
    # A bigint key is shown as its high and low 32 bits (classid, objid); shifted back
    # together they wrap to the signed key.
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = ANY(%s) "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [list(keys)],
        )
        row = cur.fetchone()
        return int(row[0]) if row else 0


def session_turn_state(session: Session | SessionId) -> TurnState:
    """Whether a turn is open, how the last one ended, and the approvals a running turn
    waits for."""
    sid = session.id if isinstance(session, Session) else session
    marker = latest_event(sid, TURN_MARKERS)
    if marker is None or not is_open(marker):
        return turn_state(marker, lock_held=False, observed=late_agent(sid, marker))
    if not turn_lock_held(sid):
        return turn_state(marker, lock_held=False)
    turn = turn_number(marker)
    approvals = pending_approvals(events_of_turns(sid, [turn])) if turn is not None else ()
    return turn_state(marker, lock_held=True, approvals=approvals)


def late_agent(session_id: SessionId, marker: EventRecord | None) -> EventRecord | None:
    """The newest `turn/observed` of the turn `marker` ended (an observed session's agent
    span that came after the turn closed), if any. Only a turn recorded from spans (its
    `turn/end` keeps them under `observed`) is looked up: the runtime's turns have none."""
    if marker is None or marker.type != "turn/end" or "observed" not in marker.data:
        return None
    if (turn := turn_number(marker)) is None:
        return None
    return latest_event(session_id, ("turn/observed",), after_seq=marker.seq, turn=turn)


def open_turn_approvals(session: Session | SessionId) -> tuple[PendingApproval, ...]:
    """The approvals the session's open turn waits for, oldest first (none without one)."""
    sid = session.id if isinstance(session, Session) else session
    marker = latest_event(sid, TURN_MARKERS)
    if marker is None or not is_open(marker):
        return ()
    turn = turn_number(marker)
    return pending_approvals(events_of_turns(sid, [turn])) if turn is not None else ()


def turn_states(session_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, TurnState]:
    """The turn state of each session (without approvals): one read of each session's
    newest turn marker (an index scan back from its head) and, for a turn recorded from
    spans that has ended, of its late agent span's `turn/observed`, and of the lock of
    those open."""
    if not session_ids:
        return {}
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT s.id, m.seq, m.type, m.schema_version, m.time, m.data, m.entry_id, m.turn,
                   m.step, m.ignorable,
                   o.seq, o.type, o.schema_version, o.time, o.data, o.entry_id, o.turn,
                   o.step, o.ignorable
            FROM unnest(%s::uuid[]) AS s(id)
            JOIN LATERAL (
                SELECT * FROM sessions_app_event e
                WHERE e.session_id = s.id AND e.type IN ('turn/start', 'turn/end')
                ORDER BY e.seq DESC LIMIT 1
            ) m ON true
            LEFT JOIN LATERAL (
                SELECT * FROM sessions_app_event e
                WHERE m.type = 'turn/end' AND m.data ? 'observed'
                  AND e.session_id = s.id AND e.turn = m.turn
                  AND e.type = 'turn/observed' AND e.seq > m.seq
                ORDER BY e.seq DESC LIMIT 1
            ) o ON true
            """,
            [[str(i) for i in session_ids]],
        )
        rows = cur.fetchall()
    markers = {row[0]: found[0] for row in rows if (found := records([row[1:10]]))}
    late = {
        row[0]: found[0] for row in rows if row[10] is not None and (found := records([row[10:]]))
    }
    states: dict[uuid.UUID, TurnState] = {}
    for sid in session_ids:
        marker = markers.get(sid)
        held = marker is not None and is_open(marker) and turn_lock_held(sid)
        states[sid] = turn_state(marker, lock_held=held, observed=late.get(sid))
    return states


# --- turn numbers ----------------------------------------------------------------------------


def turn_numbers(session: Session) -> list[int]:
    """The numbers of the session's turns, oldest first."""
    turns = (
        Event.objects.filter(session=session, type="turn/start", turn__isnull=False)
        .order_by("seq")
        .values_list("turn", flat=True)
    )
    return [t for t in turns if t is not None]


def all_turns(session: Session) -> list[int]:
    """Every turn number of the session, ascending."""
    return sorted(
        t
        for t in Event.objects.filter(session_id=session.id, type="turn/start")
        .values_list("turn", flat=True)
        .distinct()
        if t is not None
    )


def has_turns(session: Session) -> bool:
    return Event.objects.filter(session_id=session.id, type="turn/start").exists()


def turns_of_entries(session: Session, path: Sequence[EntryRecord]) -> list[int]:
    """The turns that added entries of `path`."""
    if not path:
        return []
    # One key lookup per entry: the LATERAL LIMIT keeps the planner from scanning the
    # session's events by another index (it has no statistics on session_id to cost them).
    with connection.cursor() as cur:
        cur.execute(
            "SELECT DISTINCT ev.turn FROM unnest(%s::bigint[]) AS p(seq) CROSS JOIN LATERAL ("
            "  SELECT e.turn FROM sessions_app_event e"
            "  WHERE e.session_id = %s AND e.seq = p.seq LIMIT 1"
            ") ev WHERE ev.turn IS NOT NULL",
            [[e.seq for e in path], str(session.id)],
        )
        return sorted(int(row[0]) for row in cur.fetchall())


def path_turns(session: Session, leaf: str | None, *, min_depth: int = 0) -> list[int]:
    """The turns that added entries on the path to `leaf`, from `min_depth` down (without
    reading the entries)."""
    if leaf is None:
        return []
    with connection.cursor() as cur:
        cur.execute(
            f"{store.PATH_CTE} SELECT DISTINCT ev.turn FROM path JOIN sessions_app_event ev "
            "ON ev.session_id = %(s)s AND ev.seq = path.seq "
            "WHERE ev.turn IS NOT NULL AND path.depth >= %(min_depth)s",
            {"s": str(session.id), "leaf": leaf, "min_depth": min_depth},
        )
        return sorted(int(row[0]) for row in cur.fetchall())


def branch_turns(
    session: Session, leaf: str | None, before: int | None, *, page: int = DEFAULT_PAGE_TURNS
) -> tuple[list[int], bool]:
    """The turns of the branch shown, and whether that is all of them: the latest page (of
    `page` turns) is found from the end of the path alone (a long path is not walked to its
    root)."""
    if leaf is None:
        return [], True
    depth = store.depth_of(session.id, leaf) or 0
    if depth > TURN_SCAN_ENTRIES and not has_turns(session):
        return [], True  # an imported session: no turns to look for
    if before is None and depth > TURN_SCAN_ENTRIES:
        recent = path_turns(session, leaf, min_depth=depth - TURN_SCAN_ENTRIES)
        if len(recent) > page:
            return recent, False
    return path_turns(session, leaf), True


def turn_start_seq(session: Session, turn: int) -> int | None:
    """The seq of the first event of `turn`, if it has one."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT min(seq) FROM sessions_app_event WHERE session_id = %s AND turn = %s",
            [str(session.id), turn],
        )
        row = cur.fetchone()
    return int(row[0]) if row and row[0] is not None else None
