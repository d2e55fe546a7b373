"""Reading committed events after each session's checkpoint and projecting them; the lag."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from projections.records import EventRecord
from sessions_app import store
from sessions_app.errors import DomainError
from sessions_app.projectors.pending import Deferred, PendingSession, Projector

# The advisory lock (one key, session level) that the working projector of a database holds.
LOCK_KEY = 0x5354_5244_5052_4A31 & 0x7FFF_FFFF_FFFF_FFFF  # "STRDPRJ1"
# One transaction reads at most this many events, from at most this many sessions: a
# batch commits in well under a second, and a crash repeats no more than one batch's work.
EVENTS_PER_BATCH = 2000
SESSIONS_PER_BATCH = 50

_CHECKPOINTS = "sessions_app_projectorcheckpoint"


class CheckpointMoved(DomainError):
    """Another projector moved a checkpoint under this one: its batch is rolled back."""

    code = "conflict"


@dataclass(frozen=True, slots=True)
class Lag:
    projector: str
    sessions: int  # sessions with events not projected yet
    events: int  # events not projected yet
    oldest: datetime | None  # the time of the oldest of them


def registered() -> list[Projector]:
    from sessions_app.projectors import otlp
    from sessions_app.projectors.search import SearchProjector
    from sessions_app.projectors.usage import UsageProjector

    found: list[Projector] = [SearchProjector(), UsageProjector()]
    if otlp.enabled():  # STRAND_OTLP_ENDPOINT is set
        found.append(otlp.OtlpProjector())
    return found


# Called after a batch's output is written and again after its checkpoints are, before the
# batch commits: the tests set it to fail a batch between two writes.
between_writes: Callable[[], None] | None = None


def project_pending(projectors: Sequence[Projector] | None = None) -> int:
    """Project every committed event not projected yet, batch by batch; the number of
    events read. The caller holds `LOCK_KEY` (or knows no other projector runs)."""
    total = 0
    for projector in projectors if projectors is not None else registered():
        ready = getattr(projector, "ready", None)
        while ready is None or ready():
            try:
                done = _project_batch(projector)
            except Deferred:
                break  # rolled back; tried again when it is ready
            total += done
            if not done:
                break
    return total


def _project_batch(projector: Projector) -> int:
    """One transaction: some sessions' events after their checkpoints (read in one query),
    their output and their new checkpoints (written in a few statements for all of them).
    The number of events read (0: nothing was pending)."""
    with transaction.atomic():
        with connection.cursor() as cur:
            # Not waiting for the commit to reach the disk: a batch lost in a crash of the
            # database is lost with its checkpoints, and projected again.
            cur.execute("SET LOCAL synchronous_commit = off")
        ranges: list[tuple[PendingSession, int]] = []  # each session and the seq read up to
        budget = EVENTS_PER_BATCH
        for session in _pending_sessions(projector.name, SESSIONS_PER_BATCH):
            if budget <= 0:
                break
            upto = min(session.last_seq, session.checkpoint + budget)
            ranges.append((session, upto))
            budget -= upto - session.checkpoint
        if not ranges:
            return 0
        events = _events_in(ranges)
        projector.apply([(session, events.get(session.id, [])) for session, _ in ranges])
        if between_writes is not None:
            between_writes()
        _move_checkpoints(projector.name, ranges)
        if between_writes is not None:
            between_writes()
        return sum(upto - session.checkpoint for session, upto in ranges)


def _pending_sessions(name: str, limit: int) -> list[PendingSession]:
    """The sessions with events after their checkpoint, the longest unvisited first: a
    session that keeps being written to is still read within a few batches."""
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT s.id, s.owner_id, s.last_seq, COALESCE(c.seq, -1)
            FROM sessions_app_session s
            LEFT JOIN {_CHECKPOINTS} c ON c.projector = %s AND c.session_id = s.id
            WHERE s.last_seq > COALESCE(c.seq, -1)
            ORDER BY c.projected_at NULLS FIRST
            LIMIT %s
            """,
            [name, limit],
        )
        return [PendingSession(*row) for row in cur.fetchall()]


def _events_in(ranges: Sequence[tuple[PendingSession, int]]) -> dict[uuid.UUID, list[EventRecord]]:
    """The events of each session after its checkpoint up to its seq, in seq order, by
    session: one query, each range read by the (session, seq) key."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT e.session_id, e.seq, e.type, e.schema_version, e.time, e.data, e.entry_id,
                   e.turn, e.step, e.ignorable
            FROM unnest(%s::uuid[], %s::bigint[], %s::bigint[]) AS r(session_id, after, upto)
            JOIN sessions_app_event e
              ON e.session_id = r.session_id AND e.seq > r.after AND e.seq <= r.upto
            ORDER BY e.session_id, e.seq
            """,
            [
                [session.id for session, _ in ranges],
                [session.checkpoint for session, _ in ranges],
                [upto for _, upto in ranges],
            ],
        )
        rows = cur.fetchall()
    by_session: dict[uuid.UUID, list[tuple[Any, ...]]] = {}
    for session_id, *row in rows:
        by_session.setdefault(session_id, []).append(tuple(row))
    return {sid: store._event_records(session_rows) for sid, session_rows in by_session.items()}


def _move_checkpoints(name: str, ranges: Sequence[tuple[PendingSession, int]]) -> None:
    """Each session's checkpoint moved from the seq it was read at to `upto`; if another
    projector moved one meanwhile, the batch fails (and rolls back)."""
    moved = [(s.id, s.checkpoint, upto) for s, upto in ranges if s.checkpoint >= 0]
    first = [(s.id, upto) for s, upto in ranges if s.checkpoint < 0]
    with connection.cursor() as cur:
        if moved:
            cur.execute(
                f"""
                UPDATE {_CHECKPOINTS} c SET seq = r.upto, projected_at = now()
                FROM unnest(%s::uuid[], %s::bigint[], %s::bigint[]) AS r(session_id, was, upto)
                WHERE c.projector = %s AND c.session_id = r.session_id AND c.seq = r.was
                """,
                [[m[0] for m in moved], [m[1] for m in moved], [m[2] for m in moved], name],
            )
            if cur.rowcount != len(moved):
                raise CheckpointMoved(f"a {name} checkpoint moved under this projector")
        if first:
            cur.execute(
                f"""
                INSERT INTO {_CHECKPOINTS} (projector, session_id, seq, projected_at)
                SELECT %s, r.session_id, r.upto, now()
                FROM unnest(%s::uuid[], %s::bigint[]) AS r(session_id, upto)
                ON CONFLICT (projector, session_id) DO NOTHING
                """,
                [name, [f[0] for f in first], [f[1] for f in first]],
            )
            if cur.rowcount != len(first):
                raise CheckpointMoved(f"a {name} checkpoint appeared under this projector")


def checkpoints(name: str, session_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT session_id, seq FROM {_CHECKPOINTS} "
            "WHERE projector = %s AND session_id = ANY(%s)",
            [name, list(session_ids)],
        )
        return {sid: int(seq) for sid, seq in cur.fetchall()}


def session_forget(session_id: uuid.UUID | str) -> None:
    """Drop every projector's output and checkpoint of a session (in the caller's
    transaction: the one that deletes the session)."""
    for projector in registered():
        projector.forget(session_id)
    with connection.cursor() as cur:
        cur.execute(f"DELETE FROM {_CHECKPOINTS} WHERE session_id = %s", [str(session_id)])


def projector_lag(name: str) -> Lag:
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT count(*), COALESCE(sum(p.last_seq - p.done), 0), min(first.time)
            FROM (
                SELECT s.id, s.last_seq, COALESCE(c.seq, -1) AS done
                FROM sessions_app_session s
                LEFT JOIN {_CHECKPOINTS} c ON c.projector = %s AND c.session_id = s.id
                WHERE s.last_seq > COALESCE(c.seq, -1)
            ) p
            LEFT JOIN LATERAL (
                SELECT e.time FROM sessions_app_event e
                WHERE e.session_id = p.id AND e.seq = p.done + 1
            ) first ON true
            """,
            [name],
        )
        row = cur.fetchone()
    assert row is not None
    return Lag(name, int(row[0]), int(row[1]), row[2])
