"""Writes of a session's workspace that happen outside a turn: a fork's starting files."""

from __future__ import annotations

import os
from pathlib import Path

from projections.workspace import SNAPSHOT, Manifest, manifest_data
from runtime.workspace import materialize
from sessions_app import store
from sessions_app.errors import DomainError
from sessions_app.models import Session
from sessions_app.selectors.workspace import workspace_at
from sessions_app.store import NewEvent
from sessions_app.store.blobs import blobs_copy, blobs_get


def workspace_fork(*, source: Session, fork: Session, entry_id: str) -> Manifest:
    """Record that `fork` starts from `source`'s files at `entry_id` (the fork point, which
    the fork copied with its id): one full `fork` snapshot there, after copying the contents
    for the fork's owner when that is someone else. Called inside the fork's transaction;
    the manifest recorded (empty, and nothing recorded, when there are no files)."""
    manifest = workspace_at(source.id, entry_id) or {}
    if not manifest or not fork.cwd:
        return {}
    blobs_copy(
        from_owner_id=source.owner_id,
        to_owner_id=fork.owner_id,
        shas=[f.sha256 for f in manifest.values()],
    )
    files = manifest_data(manifest)
    data = {"at": entry_id, "reason": "fork", "files": files, "full": True, "manifest": files}
    store.append_events(fork.id, fork.last_seq, [NewEvent(SNAPSHOT, data)])
    return manifest


def workspace_materialize(*, session: Session, manifest: Manifest) -> None:
    """Write `manifest`'s files into `session`'s (new, empty) folder from its owner's
    contents."""
    if not manifest or not session.cwd:
        return
    blobs = blobs_get(owner_id=session.owner_id, shas=[f.sha256 for f in manifest.values()])
    if len(blobs) < len({f.sha256 for f in manifest.values()}):
        raise DomainError("the workspace's contents are missing from the store")
    materialize(Path(os.path.realpath(session.cwd)), {}, manifest, blobs)
