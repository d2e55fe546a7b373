"""The workspace at an entry: a pure fold of the `workspace/snapshot` events on its path.

A snapshot is recorded at an entry (`at`; None for the root, which is on every path). The
workspace at entry E is what the snapshots at E's ancestors and E itself leave, applied in
the order they were recorded (seq). Seq order makes a checkpoint exact: a full manifest
recorded at E is the fold of everything on E's path before it, so it can stand in for it.
(Snapshots are recorded at the entry the folder shows, which in practice is the newest on
its path, so seq order and path order agree.)

A `full` snapshot is also a checkpoint: besides its changes it carries `manifest`, the whole
workspace there after them, so the fold starts from the last one on the path that holds
everything before it and applies only the snapshots after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from projections.records import EventRecord

SNAPSHOT = "workspace/snapshot"


@dataclass(frozen=True, slots=True)
class WorkspaceFile:
    sha256: str
    size: int
    mode: int = 0o644
    mtime_ns: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    seq: int
    at: str | None
    reason: str
    files: Mapping[str, WorkspaceFile] = field(default_factory=dict)
    deleted: tuple[str, ...] = ()
    # The whole workspace at `at` after this snapshot, on a checkpoint; else None.
    manifest: Mapping[str, WorkspaceFile] | None = None

    @property
    def full(self) -> bool:
        return self.manifest is not None


Manifest = Mapping[str, WorkspaceFile]


@dataclass(frozen=True, slots=True)
class WorkspaceChange:
    """What turns one manifest into another: files to write (new or changed) and paths to
    delete."""

    write: Mapping[str, WorkspaceFile]
    delete: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.write and not self.delete


def file_of(data: Mapping[str, Any]) -> WorkspaceFile:
    return WorkspaceFile(
        str(data["sha256"]),
        int(data["size"]),
        int(data.get("mode", 0o644)),
        int(data.get("mtime_ns", 0)),
    )


def snapshot_of(event: EventRecord) -> Snapshot:
    """The snapshot a `workspace/snapshot` event records."""
    data = event.data
    files = data.get("files") or {}
    manifest = data.get("manifest")
    at = data.get("at")
    return Snapshot(
        seq=event.seq,
        at=at if isinstance(at, str) else None,
        reason=str(data.get("reason", "")),
        files={str(path): file_of(state) for path, state in files.items()},
        deleted=tuple(str(p) for p in data.get("deleted") or ()),
        manifest=(
            {str(path): file_of(state) for path, state in manifest.items()}
            if data.get("full") and isinstance(manifest, Mapping)
            else None
        ),
    )


def snapshots_on_path(path: Sequence[str], snapshots: Iterable[Snapshot]) -> list[Snapshot]:
    """The snapshots on the root→leaf `path` (entry ids), in fold order (seq)."""
    on = set(path)
    return sorted((s for s in snapshots if s.at is None or s.at in on), key=lambda s: s.seq)


def apply(manifest: Mapping[str, WorkspaceFile], snapshot: Snapshot) -> dict[str, WorkspaceFile]:
    """`manifest` after `snapshot`'s changes."""
    out = dict(manifest)
    for path in snapshot.deleted:
        out.pop(path, None)
    out.update(snapshot.files)
    return out


def fold_workspace(path: Sequence[str], snapshots: Iterable[Snapshot]) -> Manifest:
    """The workspace at the last entry of `path` (the empty path: the root's workspace)."""
    ordered = snapshots_on_path(path, snapshots)
    start = _checkpoint_index(path, ordered)
    manifest: dict[str, WorkspaceFile] = {}
    if start is not None:
        manifest = dict(ordered[start].manifest or {})
    for snapshot in ordered[(start + 1 if start is not None else 0) :]:
        manifest = apply(manifest, snapshot)
    return MappingProxyType(dict(sorted(manifest.items())))


def _checkpoint_index(path: Sequence[str], ordered: Sequence[Snapshot]) -> int | None:
    """Where the fold may start: the last checkpoint that holds everything before it on this
    path. A checkpoint at E is the fold at E when it was written; it misses any snapshot
    recorded earlier below E (at an entry of this path deeper than E), so such a checkpoint
    is passed over for an earlier one (and applied as its changes). None when none
    qualifies: the fold applies every snapshot's changes."""
    position = {entry_id: index + 1 for index, entry_id in enumerate(path)}
    deepest_before: list[int] = []
    deepest = 0
    for snapshot in ordered:
        deepest_before.append(deepest)
        deepest = max(deepest, 0 if snapshot.at is None else position[snapshot.at])
    for index in range(len(ordered) - 1, -1, -1):
        snapshot = ordered[index]
        at = 0 if snapshot.at is None else position[snapshot.at]
        if snapshot.full and deepest_before[index] <= at:
            return index
    return None


def since_checkpoint(path: Sequence[str], snapshots: Iterable[Snapshot]) -> int:
    """How many snapshots the fold at `path`'s end applies after the checkpoint it starts
    from (all of them when there is none): when it reaches N, the next snapshot recorded
    there is written full."""
    ordered = snapshots_on_path(path, snapshots)
    start = _checkpoint_index(path, ordered)
    return len(ordered) if start is None else len(ordered) - start - 1


def workspace_change(before: Manifest, after: Manifest) -> WorkspaceChange:
    """The writes and deletions that take `before` to `after` (a file whose content and mode
    agree is left alone, whatever its recorded time)."""
    write = {
        path: state
        for path, state in after.items()
        if path not in before
        or (before[path].sha256, before[path].mode) != (state.sha256, state.mode)
    }
    delete = tuple(sorted(path for path in before if path not in after))
    return WorkspaceChange(MappingProxyType(dict(sorted(write.items()))), delete)


def manifest_data(manifest: Mapping[str, WorkspaceFile]) -> dict[str, dict[str, int | str]]:
    """A manifest as a snapshot's `files` holds it."""
    return {
        path: {"sha256": f.sha256, "size": f.size, "mode": f.mode, "mtime_ns": f.mtime_ns}
        for path, f in manifest.items()
    }
