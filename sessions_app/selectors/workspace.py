"""Reads of a session's workspace: the files at an entry, folded from its snapshots.

The fold at an entry reads a checkpoint and a tail (DESIGN §11, §12): the newest full
snapshot on the entry's path that holds everything recorded before it there, then the
snapshots on the path after it. A checkpoint is written in the same append as the changes
it covers, so a committed one is always whole. Checkpoints are found newest first through
their own index (`event_checkpoint_seq`), the tail through the snapshots' index
(`event_snapshot_seq`), and the path is read upward from the entry only as far as the
checkpoint (entries know their depth): what a read costs is bounded by what was recorded
since that checkpoint, not by the session's history or the path's length.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection

from projections.records import EventRecord
from projections.workspace import SNAPSHOT, Manifest, Snapshot, fold_workspace, snapshot_of
from runtime.workspace import LEAF_TYPES, shown_entry
from sessions_app.selectors.events import _COLUMNS, latest_event, records
from sessions_app.selectors.runtime import events_of_types
from sessions_app.store import PATH_CTE

# Checkpoints looked at per query (at most) while walking back for one that holds the path.
CHECKPOINT_PAGE = 64
# The checkpoints: full snapshots, which their own index (`event_checkpoint_seq`) holds.
CHECKPOINT_SQL = "type = 'workspace/snapshot' AND (data -> 'full') = 'true'::jsonb"


def workspace_snapshots(session_id: uuid.UUID | str) -> list[Snapshot]:
    """Every snapshot of the session (what `verify` checks; the fold reads less)."""
    return [snapshot_of(e) for e in events_of_types(session_id, (SNAPSHOT,))]


@dataclass
class _PathUp:
    """The path above an entry, read upward only as far as a read needs it: (entry id,
    seq, depth) from `rows[0]` (the highest read) down to the entry."""

    session_id: str
    rows: list[tuple[str, str | None, int, int]]  # entry_id, parent_id, seq, depth

    @classmethod
    def of(cls, session_id: str, entry_id: str | None) -> _PathUp | None:
        path = cls(session_id, [])
        if entry_id is not None:
            path.rows = path._walk(entry_id, 1 << 30)  # the entry alone
            if not path.rows:
                return None
        return path

    @property
    def ids(self) -> list[str]:
        return [row[0] for row in self.rows]

    @property
    def top(self) -> int:
        """The depth of the highest entry read (-1: the path is empty, the root's)."""
        return self.rows[0][3] if self.rows else -1

    def id_at(self, depth: int) -> str | None:
        """The id of the path's entry at `depth`, reading further up as needed."""
        if not self.rows or depth > self.rows[-1][3] or depth < 0:
            return None
        if depth < self.top and self.rows[0][1] is not None:
            self.rows = self._walk(self.rows[0][1], depth) + self.rows
        index = depth - self.top
        return self.rows[index][0] if 0 <= index < len(self.rows) else None

    def _walk(self, start: str, min_depth: int) -> list[tuple[str, str | None, int, int]]:
        with connection.cursor() as cur:
            cur.execute(
                f"{PATH_CTE} SELECT entry_id, parent_id, seq, depth FROM path ORDER BY depth",
                {"s": self.session_id, "leaf": start, "min_depth": min_depth},
            )
            return [(str(a), b, int(c), int(d)) for a, b, c, d in cur.fetchall()]


def workspace_reads(
    session_id: uuid.UUID | str, entry_id: str | None, also: Sequence[str] = ()
) -> tuple[list[str], list[EventRecord]] | None:
    """What the fold at `entry_id` (None: the root) reads: the part of its root→entry path
    that the snapshots read are at, and those snapshot events, oldest first (the newest
    checkpoint on the path that holds everything before it there, and the path's
    snapshots after it; all of the path's when none does). The path reaches up to those
    of `also` (entries of snapshots not yet stored) that are on it. None for an unknown
    entry."""
    sid = str(session_id)
    path = _PathUp.of(sid, entry_id)
    if path is None:
        return None
    start = _checkpoint_seq(sid, path)
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {_COLUMNS} FROM sessions_app_event "
            "WHERE session_id = %s AND type = %s AND seq >= %s ORDER BY seq",
            [sid, SNAPSHOT, start],
        )
        tail = records(cur.fetchall())
    on = _on_path(sid, path, {str(e.data.get("at")) for e in tail if e.data.get("at")} | set(also))
    return path.ids, [e for e in tail if e.data.get("at") is None or e.data.get("at") in on]


def _on_path(session_id: str, path: _PathUp, ats: set[str]) -> set[str]:
    """Those of `ats` that are entries of the path (reading it further up when one of them
    is above what was read)."""
    known = set(path.ids)
    others = sorted(ats - known)
    if others:
        for at, depth in _depths(session_id, others).items():
            if path.id_at(depth) == at:
                known.add(at)
    return known & ats


def _depths(session_id: str, ids: Sequence[str]) -> dict[str, int]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT entry_id, depth FROM sessions_app_entry "
            "WHERE session_id = %s AND entry_id = ANY(%s)",
            [session_id, list(ids)],
        )
        return {str(a): int(b) for a, b in cur.fetchall()}


def _checkpoint_seq(session_id: str, path: _PathUp) -> int:
    """The seq of the newest checkpoint the fold at the path's end may start from (0: none).

    A checkpoint at E is the fold at E when it was written, so it holds the path's snapshots
    unless one was recorded earlier at an entry of the path below E (the folder was moved
    back to E after it): such a checkpoint is passed over for an older one. A snapshot at an
    entry is recorded after that entry, so only those after E's next entry on the path are
    looked at. Checkpoints are read newest first, a few at a time (each holds a manifest)."""
    before, page = 1 << 62, 1
    while True:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT seq, data->>'at' FROM sessions_app_event "
                f"WHERE session_id = %s AND {CHECKPOINT_SQL} AND seq < %s "
                "ORDER BY seq DESC LIMIT %s",
                [session_id, before, page],
            )
            found = cur.fetchall()
        depths = _depths(session_id, sorted({at for _, at in found if at is not None}))
        for seq, at in found:
            depth = -1 if at is None else depths.get(at, -2)
            if depth == -1:
                path.id_at(0)  # a checkpoint at the root: below it is the whole path
            elif depth < 0 or path.id_at(depth) != at:
                continue  # another branch's, or below the entry
            below = [row for row in path.rows if row[3] > depth]
            if not below or not _recorded_between(
                session_id, [r[0] for r in below], below[0][2], int(seq)
            ):
                return int(seq)
        if len(found) < page:
            return 0
        before, page = int(found[-1][0]), min(page * 4, CHECKPOINT_PAGE)


def _recorded_between(
    session_id: str, entry_ids: Sequence[str], after_seq: int, before_seq: int
) -> bool:
    """Whether a snapshot at one of `entry_ids` has a seq between the two (exclusive)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM sessions_app_event WHERE session_id = %s AND type = %s "
            "AND seq > %s AND seq < %s AND data->>'at' = ANY(%s) LIMIT 1",
            [session_id, SNAPSHOT, after_seq, before_seq, list(entry_ids)],
        )
        return cur.fetchone() is not None


def workspace_at(session_id: uuid.UUID | str, entry_id: str | None) -> Manifest | None:
    """The workspace at `entry_id` (None: the root's, before any entry); None when the
    session has no such entry."""
    read = workspace_reads(session_id, entry_id)
    if read is None:
        return None
    path, events = read
    return fold_workspace(path, [snapshot_of(e) for e in events])


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
    session_id: uuid.UUID | str, entry_id: str | None, also: Sequence[str] = ()
) -> tuple[list[str], list[Snapshot]]:
    """The part of the path to `entry_id` the fold at it needs (up to those of `also` on
    it), and the snapshots it reads (nothing for an unknown entry)."""
    read = workspace_reads(session_id, entry_id, also)
    if read is None:
        return [], []
    return read[0], [snapshot_of(e) for e in read[1]]
