"""Files a user uploads into a session's workspace: one `upload` snapshot at the current
leaf, with the files in the folder and their contents in the owner's blob store.

The upload is read and checked whole first (`upload_archive`: names, kinds, sizes), then,
under the session's turn lock (refused while a turn runs), in one transaction:

1. changes made by hand since the last snapshot are recorded at the entry the folder shows
   (`outside`, or `recovery` after a turn its process did not finish), so none is lost;
2. when the current leaf's workspace is another, the folder is brought to it (`restore`);
3. the uploaded files are recorded at the current leaf (`upload`), replacing files of the
   same path; an uploaded file where the workspace has a folder (or the other way round),
   or an upload that would pass the workspace quota, is refused.

The snapshots go in one append, then the folder is rewritten. Writing the folder is the
last step inside the transaction: if it fails the transaction rolls back and what was
written is put back as it was, so neither the facts nor the folder keep part of an upload.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from projections.workspace import (
    SNAPSHOT,
    Manifest,
    Snapshot,
    WorkspaceFile,
    fold_workspace,
    workspace_change,
)
from runtime.tools import WorkspaceQuota
from runtime.workspace import WorkspaceTooLarge, materialize, scan, snapshot_fact
from sessions_app import store, workspaces
from sessions_app.errors import DomainError
from sessions_app.models import Session
from sessions_app.selectors.workspace import folder_shows, path_snapshots, workspace_at
from sessions_app.services import session_turn_lock
from sessions_app.services.upload_archive import (
    Budget,
    UploadedFile,
    UploadRefused,
    UploadTooLarge,
    archive_files,
    member_path,
)
from sessions_app.store import NewEvent
from sessions_app.store.blobs import blobs_get, blobs_put


@dataclass(frozen=True, slots=True)
class Uploaded:
    """What an upload recorded: the entry it is at and the files it wrote."""

    entry: str | None
    files: int
    bytes: int
    seq: int


def upload_quota(session: Session) -> tuple[Path, WorkspaceQuota]:
    """The session's folder, checked, and the quota an upload to it is held to."""
    if not session.cwd:
        raise DomainError("this session has no working directory to upload into")
    root = workspaces.cwd_for_turn(session.owner, session.cwd)
    return Path(root), workspaces.run_limits(session.owner, root).workspace


def upload_budget(session: Session, quota: WorkspaceQuota) -> Budget:
    """What an upload may add to the workspace at the current leaf (checked again, exactly,
    under the turn lock)."""
    manifest = workspace_at(session.id, session.leaf_entry_id) or {}
    return Budget(
        quota,
        quota.max_bytes - sum(f.size for f in manifest.values()),
        quota.max_entries - len(manifest),
    )


def upload_archive_files(session: Session, body: IO[bytes]) -> list[UploadedFile]:
    """The checked files of the archive `body` (seekable) uploaded to `session`."""
    _, quota = upload_quota(session)
    return archive_files(body, quota, upload_budget(session, quota))


def upload_named_files(
    session: Session, folder: str, files: Sequence[tuple[str, IO[bytes], int]]
) -> list[UploadedFile]:
    """The checked files (name, stream, size) uploaded one by one into `folder` ("" the
    workspace's top)."""
    _, quota = upload_quota(session)
    budget = upload_budget(session, quota)
    out: list[UploadedFile] = []
    names: set[str] = set()
    for name, stream, size in files:
        path = member_path(f"{folder.strip('/')}/{name}" if folder.strip("/") else name, quota)
        if path in names:
            raise UploadRefused(f"{path!r}: the upload names this file twice", path)
        names.add(path)
        budget.take(path, size)
        content = stream.read(size + 1)
        if len(content) != size:
            raise UploadRefused(f"{path!r}: the upload holds another size than it says", path)
        out.append(UploadedFile(path, 0o644, content))
    return out


def workspace_upload(*, session: Session, files: Sequence[UploadedFile]) -> Uploaded:
    """Record and write `files` (checked) into `session`'s workspace at its current leaf."""
    if not files:
        raise UploadRefused("the upload holds no files")
    root, quota = upload_quota(session)
    now = time.time_ns()
    contents = {hashlib.sha256(f.content).hexdigest(): f.content for f in files}
    uploaded = {
        f.path: WorkspaceFile(hashlib.sha256(f.content).hexdigest(), len(f.content), f.mode, now)
        for f in files
    }
    with session_turn_lock(session.id):
        session.refresh_from_db(fields=["last_seq", "leaf_entry_id"])
        leaf = session.leaf_entry_id
        shown, interrupted = folder_shows(session.id)
        ids, snapshots = path_snapshots(session.id, shown)
        known = fold_workspace(ids, snapshots)
        try:
            found = scan(root, known, quota)
        except WorkspaceTooLarge as exc:
            raise UploadTooLarge(str(exc)) from None
        facts: list[NewEvent] = []
        recorded: list[Snapshot] = []  # what `facts` record, as the fold reads them
        if not found.empty:
            reason = "recovery" if interrupted else "outside"
            fact, snap = snapshot_fact(
                reason, shown, found.files, found.deleted, **_at(ids, snapshots, found.manifest)
            )
            facts.append(NewEvent(SNAPSHOT, dict(fact.data)))
            snapshots.append(snap)
            recorded.append(snap)
        before: Manifest = found.manifest
        current = before
        if leaf != shown:
            also = [shown] if recorded and shown is not None else []
            ids, leaf_snapshots = path_snapshots(session.id, leaf, also)
            snapshots = [*leaf_snapshots, *recorded]
            target = fold_workspace(ids, snapshots)
            if not workspace_change(current, target).empty:
                fact, snap = snapshot_fact("restore", leaf, {}, (), **_at(ids, snapshots, target))
                facts.append(NewEvent(SNAPSHOT, dict(fact.data)))
                snapshots.append(snap)
                current = target
        after = _with_upload(current, uploaded, quota)
        changed = {p: s for p, s in uploaded.items() if _differs(current.get(p), s)}
        fact, _ = snapshot_fact("upload", leaf, changed, (), **_at(ids, snapshots, after))
        facts.append(NewEvent(SNAPSHOT, dict(fact.data)))
        blobs_put(owner_id=session.owner_id, blobs={**found.blobs, **contents})
        result = store.append_events(session.id, session.last_seq, facts)
        _rewrite(root, session.owner_id, before, after, {**found.blobs, **contents})
    return Uploaded(leaf, len(uploaded), sum(len(f.content) for f in files), result.last_seq)


def _at(path: list[str], snapshots: list[Snapshot], manifest: Manifest) -> dict[str, Any]:
    """Where a snapshot is recorded: its path, the snapshots the fold there reads, and the
    workspace after it."""
    return {"path": path, "snapshots": snapshots, "manifest": manifest}


def _differs(before: WorkspaceFile | None, after: WorkspaceFile) -> bool:
    return before is None or (before.sha256, before.mode) != (after.sha256, after.mode)


def _with_upload(
    current: Manifest, uploaded: dict[str, WorkspaceFile], quota: WorkspaceQuota
) -> dict[str, WorkspaceFile]:
    """The workspace after the upload, refused when an uploaded file and a file of the
    workspace would be a folder of each other, or past the quota."""
    folders = {"/".join(p.split("/")[:end]) for p in current for end in range(1, p.count("/") + 1)}
    for path in uploaded:
        if path in folders:
            raise UploadRefused(f"{path!r}: a file where the workspace has a folder", path)
        parts = path.split("/")
        for end in range(1, len(parts)):
            parent = "/".join(parts[:end])
            if parent in current:
                raise UploadRefused(
                    f"{path!r}: its folder {parent!r} is a file of the workspace", path
                )
    after = {**current, **uploaded}
    if quota.max_entries and len(after) > quota.max_entries:
        raise UploadTooLarge(
            f"the workspace would hold {len(after)} files, more than its {quota.max_entries}"
        )
    total = sum(f.size for f in after.values())
    if quota.max_bytes and total > quota.max_bytes:
        raise UploadTooLarge(
            f"the workspace would hold {total} bytes, more than its {quota.max_bytes}"
        )
    return dict(sorted(after.items()))


def _rewrite(
    root: Path, owner_id: int, before: Manifest, after: Manifest, blobs: dict[str, bytes]
) -> None:
    """Bring the folder from `before` to `after`; on failure, back to `before`."""
    change = workspace_change(before, after)
    wanted = {f.sha256 for f in change.write.values()}
    have = {**blobs_get(owner_id=owner_id, shas=wanted - set(blobs)), **blobs}
    try:
        materialize(root, before, after, have)
    except OSError:
        undo = workspace_change(after, before)
        old = blobs_get(owner_id=owner_id, shas={f.sha256 for f in undo.write.values()})
        materialize(root, after, before, {**have, **old})
        raise
