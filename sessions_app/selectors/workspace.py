"""Reads of a session's workspace: the files at an entry, folded from its snapshots.

The fold at an entry reads a checkpoint and a tail (DESIGN §11, §12): the newest full
snapshot on the entry's path that holds everything recorded before it there, then the
snapshots on the path after it. A checkpoint is written in the same append as the changes
it covers, so a committed one is always whole. The reads walk the snapshots of the session
newest first through their own index (`event_snapshot_seq`), so what they read is bounded by
the snapshots recorded since that checkpoint, not by the session's whole history.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db import connection

from projections.records import EntryRecord, EventRecord
from projections.workspace import SNAPSHOT, Manifest, Snapshot, fold_workspace, snapshot_of
from runtime.workspace import LEAF_TYPES, shown_entry
from sessions_app import store
from sessions_app.selectors.events import _COLUMNS, latest_event, records
from sessions_app.selectors.runtime import events_of_types

# Checkpoints looked at per query while walking back for one that holds the path.
CHECKPOINT_PAGE = 64


def workspace_snapshots(session_id: uuid.UUID | str) -> list[Snapshot]:
    """Every snapshot of the session (what `verify` checks; the fold reads less)."""
    return [snapshot_of(e) for e in events_of_types(session_id, (SNAPSHOT,))]


def snapshot_events_for_path(
    session_id: uuid.UUID | str, path: Sequence[EntryRecord]
) -> list[EventRecord]:
    """The snapshot events the fold at the end of `path` (root→entry) needs: the newest
    checkpoint on the path that holds everything before it there, and the snapshots on the
    path after it (all those on the path when none does), oldest first."""
    start = _checkpoint_seq(str(session_id), path)
    ids = [entry.id for entry in path]
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {_COLUMNS} FROM sessions_app_event "
            "WHERE session_id = %s AND type = %s AND seq >= %s "
            "AND (data->>'at' IS NULL OR data->>'at' = ANY(%s)) ORDER BY seq",
            [str(session_id), SNAPSHOT, start, ids],
        )
        return records(cur.fetchall())


def _checkpoint_seq(session_id: str, path: Sequence[EntryRecord]) -> int:
    """The seq of the newest checkpoint the fold at `path`'s end may start from (0: none).

    A checkpoint at E is the fold at E when it was written, so it holds the path's snapshots
    unless one was recorded earlier at an entry of the path below E (the folder was moved
    back to E after it): such a checkpoint is passed over for an older one. A snapshot at an
    entry is recorded after that entry, so only those after E's next entry on the path are
    looked at."""
    depth = {entry.id: index + 1 for index, entry in enumerate(path)}
    before = 1 << 62
    while True:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT seq, data->>'at' FROM sessions_app_event "
                "WHERE session_id = %s AND type = %s AND seq < %s AND data->>'full' = 'true' "
                "ORDER BY seq DESC LIMIT %s",
                [session_id, SNAPSHOT, before, CHECKPOINT_PAGE],
            )
            found = cur.fetchall()
        for seq, at in found:
            if at is not None and at not in depth:
                continue  # another branch's
            below = path[depth[at] if at is not None else 0 :]
            if not below or not _recorded_between(session_id, below, below[0].seq, seq):
                return int(seq)
        if len(found) < CHECKPOINT_PAGE:
            return 0
        before = int(found[-1][0])


def _recorded_between(
    session_id: str, entries: Sequence[EntryRecord], after_seq: int, before_seq: int
) -> bool:
    """Whether a snapshot at one of `entries` has a seq between the two (exclusive)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM sessions_app_event WHERE session_id = %s AND type = %s "
            "AND seq > %s AND seq < %s AND data->>'at' = ANY(%s) LIMIT 1",
            [session_id, SNAPSHOT, after_seq, before_seq, [e.id for e in entries]],
        )
        return cur.fetchone() is not None


def workspace_at(session_id: uuid.UUID | str, entry_id: str | None) -> Manifest | None:
    """The workspace at `entry_id` (None: the root's, before any entry); None when the
    session has no such entry."""
    path: list[EntryRecord] = []
    if entry_id is not None:
        path = store.path_to_root(session_id, entry_id)
        if not path:
            return None
    events = snapshot_events_for_path(session_id, path)
    return fold_workspace([e.id for e in path], [snapshot_of(e) for e in events])


def folder_shows(session_id: uuid.UUID | str) -> tuple[str | None, bool]:
    """The entry the session's folder shows (`runtime.workspace.folder_entry`, read here),
    and whether the turn that left it there was interrupted."""
    sid = str(session_id)
    last = latest_event(sid, (SNAPSHOT,))
    ended = latest_event(sid, ("turn/end",))
    leaf: EventRecord | None = None
    if ended is not None and (last is None or last.seq < ended.seq):
        leaf = latest_event(sid, LEAF_TYPES, before_seq=ended.seq)
    return shown_entry(last, ended, leaf)


def path_snapshots(
    session_id: uuid.UUID | str, entry_id: str | None
) -> tuple[list[EntryRecord], list[Snapshot]]:
    """The path to `entry_id` and the snapshots the fold at it reads."""
    path = [] if entry_id is None else store.path_to_root(session_id, entry_id)
    return path, [snapshot_of(e) for e in snapshot_events_for_path(session_id, path)]
