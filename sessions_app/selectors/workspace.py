"""Reads of a session's workspace: the files at an entry, folded from its snapshots."""

from __future__ import annotations

import uuid

from projections.workspace import SNAPSHOT, Manifest, Snapshot, fold_workspace, snapshot_of
from sessions_app import store
from sessions_app.selectors.runtime import events_of_types


def workspace_snapshots(session_id: uuid.UUID | str) -> list[Snapshot]:
    return [snapshot_of(e) for e in events_of_types(session_id, (SNAPSHOT,))]


def workspace_at(session_id: uuid.UUID | str, entry_id: str | None) -> Manifest | None:
    """The workspace at `entry_id` (None: the root's, before any entry); None when the
    session has no such entry."""
    if entry_id is None:
        path: list[str] = []
    else:
        path = [e.id for e in store.path_to_root(session_id, entry_id)]
        if not path:
            return None
    return fold_workspace(path, workspace_snapshots(session_id))
