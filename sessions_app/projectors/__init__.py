"""Asynchronous projections with a checkpoint (DESIGN §12): the search index, the usage
rollups and, when `STRAND_OTLP_ENDPOINT` is set, the OTLP export of finished turns
(`projectors.otlp`), kept off the append path.

A projector reads committed events after its checkpoint, session by session and seq by seq,
writes its output and moves its checkpoint in the same transaction: a crash (a killed
process, an error between two writes) rolls back the output with the checkpoint, and the
next run starts again from the checkpoint, so nothing is skipped and nothing is counted
twice.

**Why one checkpoint per session, not one global position.** Events of different sessions
commit out of order: an append that took a higher event id (or a later time) can commit
before one that took a lower id, so a reader that remembered "every event up to id N" would
skip the one committed late. Within one session the order is safe: the append path locks the
session row and numbers its events gaplessly, and `Session.last_seq` is updated in the same
transaction as the events it counts. So each projector keeps, per session, the last seq it
has projected (`ProjectorCheckpoint`), and the sessions it still has to read are exactly
those whose `last_seq` is past their checkpoint. Finding them is one scan of the session
table (no index on `last_seq`: the append path updates it on every write, and an index would
make each of those updates write to it); at a hundred thousand sessions that scan is a few
milliseconds, and it runs only when something was written.

**Where it runs.** Inside every server process (`config.startup`), and as `manage.py project
[--once]`. One projector works per database at a time: it holds a session-level advisory lock
(`LOCK_KEY`) on a connection of its own, and the others wait until it is gone. It is woken by
the process's LISTEN connection (`sessions_app.listen`, the store's commit notifications) and,
in case a notification is missed, by a short poll.

**Readers that must not be stale** (search) read the output and, in the same snapshot, the
short tail of each session after its checkpoint (`sessions_app.search`).

**Lag** (`projector_lag`): how many committed events are not projected yet, in how many
sessions, and how old the oldest of them is.
"""

from __future__ import annotations

from sessions_app.projectors.runner import (
    LOCK_KEY,
    Lag,
    Projector,
    project_pending,
    projector_lag,
    registered,
)

__all__ = ["LOCK_KEY", "Lag", "Projector", "project_pending", "projector_lag", "registered"]
