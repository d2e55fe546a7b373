"""Reading committed events after each session's checkpoint and projecting them; the lag."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from sessions_app import store
from sessions_app.errors import DomainError
from sessions_app.projectors.pending import PendingSession, Projector

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
    from sessions_app.projectors.search import SearchProjector
    from sessions_app.projectors.usage import UsageProjector

    return [SearchProjector(), UsageProjector()]


# Called after each session's output and checkpoint are written, before the batch commits:
# the tests set it to fail a batch between two writes.
between_writes: Callable[[], None] | None = None


def project_pending(projectors: Sequence[Projector] | None = None) -> int:
    """Project every committed event not projected yet, batch by batch; the number of
    events read. The caller holds `LOCK_KEY` (or knows no other projector runs)."""
    total = 0
    for projector in projectors if projectors is not None else registered():
        while True:
            done = _project_batch(projector)
            total += done
            if not done:
                break
    return total


def _project_batch(projector: Projector) -> int:
    """One transaction: some sessions' events after their checkpoints, their output and
    their new checkpoints. The number of events read (0: nothing was pending)."""
    with transaction.atomic():
        with connection.cursor() as cur:
            # Not waiting for the commit to reach the disk: a batch lost in a crash of the
            # database is lost with its checkpoints, and projected again.
            cur.execute("SET LOCAL synchronous_commit = off")
        pending = _pending_sessions(projector.name, SESSIONS_PER_BATCH)
        budget = EVENTS_PER_BATCH
        read = 0
        for session in pending:
            if budget <= 0:
                break
            upto = min(session.last_seq, session.checkpoint + budget)
            events = store.events_after(session.id, session.checkpoint, upto - session.checkpoint)
            events = [e for e in events if e.seq <= upto]
            projector.apply(session, events)
            _move_checkpoint(projector.name, session, upto)
            budget -= upto - session.checkpoint
            read += upto - session.checkpoint
            if between_writes is not None:
                between_writes()
        return read


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


def _move_checkpoint(name: str, session: PendingSession, seq: int) -> None:
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO {_CHECKPOINTS} (projector, session_id, seq, projected_at)
            VALUES (%s, %s, %s, now())
            ON CONFLICT (projector, session_id) DO UPDATE
               SET seq = EXCLUDED.seq, projected_at = EXCLUDED.projected_at
             WHERE {_CHECKPOINTS}.seq = %s
            """,
            [name, session.id, seq, session.checkpoint],
        )
        if cur.rowcount != 1:
            raise CheckpointMoved(f"the {name} checkpoint of {session.id} moved")


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
