"""The session's folder as facts (DESIGN §11): scanning it, recording what changed, and
bringing it to the workspace of the entry a turn starts from.

The folder on disk is a cache of the `workspace/snapshot` facts. Which entry it shows is
itself read from the log: the entry of the newest snapshot, or the leaf a turn ended at
when a turn ended after it. Four moments record a snapshot:

- after a tool call that may change files: what the scan finds, at the call's result
  (reason `tool`), in the same append as that result;
- before a turn, under the turn lock: what changed since the last snapshot (by hand), at
  the entry the folder showed (reason `outside`), so nothing is ever lost;
- then, when the turn starts from another entry: `restore` at that entry, in the same
  append as `turn/start`, after which the folder is rewritten to that entry's workspace.
- when crash recovery closes a turn whose process died: what its tools left in the folder
  (reason `recovery`, at the entry the folder shows), in the same append as the `turn/end`
  that closes it; failing that, the next turn records it so, before anything else.

A scan compares each file's size and modification time with the manifest first and hashes
only what differs; contents go to the owner's blob store before the snapshot naming them.
Symbolic links and special files are never followed, recorded nor written: a link in the
folder is left alone, and a restore replaces a link on its way rather than write through it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from projections.records import EventRecord
from projections.workspace import (
    SNAPSHOT,
    Manifest,
    Snapshot,
    WorkspaceFile,
    fold_workspace,
    manifest_data,
    since_checkpoint,
    snapshot_of,
    workspace_change,
)
from runtime.errors import AgentError
from runtime.ports import NewFact, SessionLog
from runtime.tools import WorkspaceQuota

# Where sessions' own folders are, in their owner's folder: a session working in the owner's
# folder itself never records them (they are other sessions' files).
SESSIONS = "sessions"
# Every this many snapshots on a path, one carries the whole manifest (a checkpoint).
CHECKPOINT_EVERY = 32
# The tools whose calls may change files (those of Pi's that do as well, by name).
CHANGES_FILES = frozenset({"write_file", "write", "edit", "bash"})
# Those that change only the file their `path` names (bash may change anything).
NAMES_ITS_FILE = frozenset({"write_file", "write", "edit"})
# Entry events: the leaf a turn ended at is the newest of these (or a `leaf/moved`).
LEAF_TYPES = (
    "user/message",
    "assistant/message",
    "tool/result",
    "entry/message",
    "entry/model_change",
    "entry/thinking_level_change",
    "entry/compaction",
    "entry/branch_summary",
    "entry/custom",
    "entry/custom_message",
    "entry/label",
    "entry/session_info",
    "entry/usage",
    "entry/context_edit",
    "leaf/moved",
)


class WorkspaceTooLarge(AgentError):
    """The folder holds more than the session's workspace quota lets Strand record."""


@dataclass(frozen=True, slots=True)
class Scanned:
    """What a scan found against a manifest: the changed files, the deleted paths, the new
    contents by hash, and the folder's manifest now."""

    files: Mapping[str, WorkspaceFile]
    deleted: tuple[str, ...]
    blobs: Mapping[str, bytes]
    manifest: Manifest

    @property
    def empty(self) -> bool:
        return not self.files and not self.deleted


# --- the disk ----------------------------------------------------------------------------


def scan(root: Path, known: Manifest, quota: WorkspaceQuota) -> Scanned:
    """The regular files under `root` compared with `known`, within `quota` (its bytes and
    entries; 0 turns a bound off)."""
    found: dict[str, WorkspaceFile] = {}
    changed: dict[str, WorkspaceFile] = {}
    blobs: dict[str, bytes] = {}
    total = 0
    for rel, info in _walk(root, _skipped(root, quota)):
        total += info.st_size
        if quota.max_entries and len(found) >= quota.max_entries:
            raise WorkspaceTooLarge(
                f"the session's folder holds more than {quota.max_entries} files, more than "
                "its workspace may record"
            )
        if quota.max_bytes and total > quota.max_bytes:
            raise WorkspaceTooLarge(
                f"the session's folder holds more than {quota.max_bytes} bytes, more than "
                "its workspace may record"
            )
        mode = stat.S_IMODE(info.st_mode)
        before = known.get(rel)
        if (
            before is not None
            and before.size == info.st_size
            and before.mtime_ns == info.st_mtime_ns
            and before.mode == mode
        ):
            found[rel] = before
            continue
        content = _read(root / rel)
        if content is None:
            continue  # gone or turned into something else while we looked
        sha = hashlib.sha256(content).hexdigest()
        state = WorkspaceFile(sha, len(content), mode, info.st_mtime_ns)
        found[rel] = state
        if before is None or (before.sha256, before.mode) != (sha, mode):
            changed[rel] = state
            blobs[sha] = content
    deleted = tuple(sorted(path for path in known if path not in found))
    return Scanned(changed, deleted, blobs, dict(sorted(found.items())))


def scan_paths(
    root: Path, known: Manifest, paths: Sequence[str], quota: WorkspaceQuota
) -> Scanned | None:
    """`scan`, for a tool that names the only files it may change (`write`, `edit`): those
    paths alone are looked at, so the cost does not grow with the folder. None when a path
    cannot be read that way (outside the folder, through a link, in another session's
    folder): then the whole folder is scanned."""
    skip = _skipped(root, quota)
    found = dict(known)
    changed: dict[str, WorkspaceFile] = {}
    blobs: dict[str, bytes] = {}
    deleted: list[str] = []
    for given in paths:
        rel = _inside(root, given)
        if rel is None or rel.split("/", 1)[0] in skip or not _real_folders(root, root / rel):
            return None
        before = known.get(rel)
        try:
            info = os.lstat(root / rel)
        except FileNotFoundError:
            if before is not None:
                deleted.append(rel)
                del found[rel]
            continue
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        mode = stat.S_IMODE(info.st_mode)
        if (
            before is not None
            and before.size == info.st_size
            and before.mtime_ns == info.st_mtime_ns
            and before.mode == mode
        ):
            continue
        content = _read(root / rel)
        if content is None:
            return None
        sha = hashlib.sha256(content).hexdigest()
        state = WorkspaceFile(sha, len(content), mode, info.st_mtime_ns)
        found[rel] = state
        if before is None or (before.sha256, before.mode) != (sha, mode):
            changed[rel] = state
            blobs[sha] = content
    return Scanned(changed, tuple(sorted(deleted)), blobs, dict(sorted(found.items())))


def _inside(root: Path, given: str) -> str | None:
    """`given` (relative to `root`, or absolute inside it) as a manifest path, or None."""
    if not isinstance(given, str) or not given or "\x00" in given:
        return None
    joined = os.path.normpath(os.path.join(root, given))
    rel = os.path.relpath(joined, root)
    if rel == "." or rel.startswith("..") or os.path.isabs(rel):
        return None
    return rel.replace(os.sep, "/")


def _walk(root: Path, skip: frozenset[str]) -> list[tuple[str, os.stat_result]]:
    out: list[tuple[str, os.stat_result]] = []
    if not root.is_dir() or root.is_symlink():
        return out
    stack = [(root, "")]
    while stack:
        folder, prefix = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for item in entries:
            rel = f"{prefix}{item.name}"
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if rel not in skip:
                    stack.append((Path(item.path), rel + "/"))
            elif stat.S_ISREG(info.st_mode):
                out.append((rel, info))
    out.sort()
    return out


def _skipped(root: Path, quota: WorkspaceQuota) -> frozenset[str]:
    """The folders under `root` that are not its session's: the other sessions' folders
    when `root` is their owner's folder (the quota's folder)."""
    if quota.folder and os.path.realpath(quota.folder) == os.path.realpath(root):
        return frozenset({SESSIONS})
    return frozenset()


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read()


def materialize(
    root: Path, current: Manifest, target: Manifest, blobs: Mapping[str, bytes]
) -> Manifest:
    """Rewrite `root` from `current` (what it holds) to `target`, the manifest it then
    holds. Each written file gets its recorded time back, so later scans skip it."""
    change = workspace_change(current, target)
    for rel in change.delete:
        path = root / rel
        if _real_folders(root, path) and (path.is_symlink() or path.is_file()):
            path.unlink()
    for rel, state in change.write.items():
        _write(root, rel, state, blobs[state.sha256])
    return dict(target)


def copy_files(source: Path, target: Path, quota: WorkspaceQuota) -> Manifest:
    """Copy the regular files of `source` into the empty folder `target` (no link, no
    other session's folder), within `quota`; the manifest copied."""
    found = scan(source, {}, quota)
    return materialize(target, {}, found.manifest, found.blobs)


def _real_folders(root: Path, path: Path) -> bool:
    """Whether every folder between `root` and `path` is a real folder (no link)."""
    current = root
    for part in path.relative_to(root).parts[:-1]:
        current = current / part
        if current.is_symlink() or not current.is_dir():
            return False
    return True


def _make_parents(root: Path, path: Path) -> None:
    """Make `path`'s parent a real folder under `root`: a link or a file in the way is
    removed, never followed."""
    current = root
    for part in path.relative_to(root).parts[:-1]:
        current = current / part
        if current.is_symlink() or (current.exists() and not current.is_dir()):
            current.unlink()
        if not current.exists():
            current.mkdir()


def _write(root: Path, rel: str, state: WorkspaceFile, content: bytes) -> None:
    path = root / rel
    _make_parents(root, path)
    if path.is_symlink():
        path.unlink()
    elif path.is_dir():
        _remove_tree(path)
    temp = path.with_name(f".{path.name}.strand-{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    os.chmod(temp, state.mode)
    if state.mtime_ns:
        os.utime(temp, ns=(state.mtime_ns, state.mtime_ns))
    os.replace(temp, path)


def _remove_tree(path: Path) -> None:
    for item in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if item.is_dir() and not item.is_symlink():
            item.rmdir()
        else:
            item.unlink()
    path.rmdir()


# --- the facts ---------------------------------------------------------------------------


@dataclass
class TurnStartFiles:
    """What a turn's start records about the folder, and the rewrite to do once recorded."""

    facts: list[NewFact] = field(default_factory=list)
    _restore: tuple[Manifest, Manifest] | None = None


class WorkspaceRecorder:
    """Records a session's folder as facts for one run of turns (none without a folder).
    The module's docstring says when."""

    def __init__(
        self,
        log: SessionLog,
        session_id: str,
        cwd: str,
        quota: WorkspaceQuota,
        *,
        checkpoint_every: int = CHECKPOINT_EVERY,
    ) -> None:
        self.log = log
        self.sid = session_id
        self.root = Path(cwd) if cwd else None
        self.quota = quota
        self.checkpoint_every = max(checkpoint_every, 1)
        # The folder as the facts have it, the entry it shows and that entry's path.
        self.manifest: Manifest = {}
        self.path: list[str] = []
        self.snapshots: list[Snapshot] = []
        # Whether the last turn was cut short (its process died) since the last snapshot:
        # what its tools changed is then recorded as `recovery`.
        self.interrupted = False

    async def _load(self) -> str | None:
        last = await self.log.last_event(self.sid, (SNAPSHOT,))
        shown, self.interrupted = await folder_entry(self.log, self.sid, last)
        self.snapshots = []
        self.path, self.snapshots = await self._read(shown)
        self.manifest = fold_workspace(self.path, self.snapshots)
        return shown

    async def _read(self, entry_id: str | None) -> tuple[list[str], list[Snapshot]]:
        """The path to `entry_id` (as far up as its fold needs) and the snapshots that fold
        reads (its newest checkpoint and the tail after it), with those this run recorded
        and has not read back."""
        pending = [s for s in self.snapshots if s.seq == _PENDING]
        also = sorted({s.at for s in pending if s.at is not None})
        path, events = await self.log.workspace_snapshots(self.sid, entry_id, also)
        return path, [*(snapshot_of(e) for e in events), *pending]

    async def before_turn(self, start: str | None) -> TurnStartFiles:
        """Under the turn lock, before the turn's first facts: record hand changes at the
        entry the folder shows, then (if the turn starts elsewhere) a `restore` at `start`.
        The facts go in the turn's first append; `settle` then rewrites the folder."""
        out = TurnStartFiles()
        if self.root is None:
            return out
        shown = await self._load()
        found = await asyncio.to_thread(scan, self.root, self.manifest, self.quota)
        if not found.empty:
            await self.log.put_blobs(self.sid, found.blobs)
            self.manifest = found.manifest
            reason = "recovery" if self.interrupted else "outside"
            out.facts.append(self._record(reason, shown, found.files, found.deleted))
        if start == shown:
            return out
        path, snapshots = await self._read(start)
        target = fold_workspace(path, snapshots)
        if workspace_change(self.manifest, target).empty:
            return out  # the same files: the turn's own snapshots will say where it is
        out._restore = (self.manifest, target)
        self.path = path
        self.snapshots = snapshots
        self.manifest = target
        out.facts.append(self._record("restore", start, {}, ()))
        return out

    async def after_recovery(self) -> NewFact | None:
        """For closing a dead process's turn: what its tools left in the folder, as a
        `recovery` snapshot at the entry the folder shows (where the next turn would record
        it); None when the folder holds what the facts say."""
        if self.root is None:
            return None
        shown = await self._load()
        found = await asyncio.to_thread(scan, self.root, self.manifest, self.quota)
        if found.empty:
            return None
        await self.log.put_blobs(self.sid, found.blobs)
        self.manifest = found.manifest
        return self._record("recovery", shown, found.files, found.deleted)

    async def after_job(self, call_id: str, job_id: str) -> NewFact | None:
        """What a background job changed in the folder when it ended, as a `job` snapshot
        at the entry the folder shows; None when it changed nothing."""
        if self.root is None:
            return None
        shown = await self._load()
        found = await asyncio.to_thread(scan, self.root, self.manifest, self.quota)
        if found.empty:
            return None
        await self.log.put_blobs(self.sid, found.blobs)
        self.manifest = found.manifest
        return self._record(
            "job", shown, found.files, found.deleted, call_id=call_id, job_id=job_id
        )

    async def settle(self, files: TurnStartFiles) -> None:
        """Bring the folder to the workspace the facts now say it shows."""
        if files._restore is None or self.root is None:
            return
        current, target = files._restore
        change = workspace_change(current, target)
        blobs = await self.log.get_blobs(
            self.sid, sorted({f.sha256 for f in change.write.values()})
        )
        missing = {f.sha256 for f in change.write.values()} - set(blobs)
        if missing:
            raise AgentError(
                f"the workspace's contents are missing {len(missing)} file(s) from the store"
            )
        self.manifest = await asyncio.to_thread(materialize, self.root, current, target, blobs)

    async def after_tool(
        self,
        tool: str,
        call_id: str,
        result: NewFact,
        arguments: Mapping[str, Any] | None = None,
    ) -> list[NewFact]:
        """The call's result, and a `tool` snapshot at it when the call changed files. A
        tool that names the one file it writes (`NAMES_ITS_FILE`) has that file looked at;
        any other, the whole folder."""
        if self.root is None or tool not in CHANGES_FILES:
            return [result]
        found: Scanned | None = None
        named = (arguments or {}).get("path") if tool in NAMES_ITS_FILE else None
        if isinstance(named, str):
            found = await asyncio.to_thread(
                scan_paths, self.root, self.manifest, [named], self.quota
            )
        if found is None:
            found = await asyncio.to_thread(scan, self.root, self.manifest, self.quota)
        self.manifest = found.manifest
        if found.empty:
            return [result]
        await self.log.put_blobs(self.sid, found.blobs)
        entry = dict(result.data["entry"])
        entry.setdefault("id", secrets.token_hex(4))
        result = NewFact(result.type, {**result.data, "entry": entry}, result.turn, result.step)
        self.path = [*self.path, entry["id"]]
        return [
            result,
            self._record("tool", entry["id"], found.files, found.deleted, call_id=call_id),
        ]

    def _record(
        self,
        reason: str,
        at: str | None,
        files: Mapping[str, WorkspaceFile],
        deleted: Sequence[str],
        **extra: Any,
    ) -> NewFact:
        # `self.path` and `self.manifest` already show the folder after this snapshot.
        fact, snapshot = snapshot_fact(
            reason,
            at,
            files,
            deleted,
            path=self.path,
            snapshots=self.snapshots,
            manifest=self.manifest,
            checkpoint_every=self.checkpoint_every,
            **extra,
        )
        self.snapshots.append(snapshot)
        return fact


def snapshot_fact(
    reason: str,
    at: str | None,
    files: Mapping[str, WorkspaceFile],
    deleted: Sequence[str],
    *,
    path: Sequence[str],
    snapshots: Sequence[Snapshot],
    manifest: Manifest,
    checkpoint_every: int = CHECKPOINT_EVERY,
    **extra: Any,
) -> tuple[NewFact, Snapshot]:
    """The `workspace/snapshot` fact of a change at `at`, whose path is `path`, after which
    the folder holds `manifest`; `snapshots` are those the fold there reads (from its
    checkpoint on). Every `checkpoint_every`-th on a path is full: it carries `manifest`,
    in the same append as the change it covers. Also the snapshot as the fold reads it
    until it is read back (its seq after every stored one)."""
    data: dict[str, Any] = {
        "at": at,
        "reason": reason,
        "files": manifest_data(files),
        "deleted": list(deleted),
        **extra,
    }
    checkpoint = since_checkpoint(path, snapshots) + 1 >= max(checkpoint_every, 1)
    if checkpoint:
        data["full"] = True
        data["manifest"] = manifest_data(manifest)
    snapshot = Snapshot(
        _PENDING, at, reason, files, tuple(deleted), dict(manifest) if checkpoint else None
    )
    return NewFact(SNAPSHOT, data), snapshot


# The seq of a snapshot this run recorded but has not read back: after every stored one.
_PENDING = 1 << 62


async def folder_entry(
    log: SessionLog, session_id: str, last_snapshot: EventRecord | None
) -> tuple[str | None, bool]:
    """The entry the session's folder shows: that of its newest snapshot, unless a turn
    ended after it, then the leaf that turn ended at (None: the root, no entry yet); and
    whether that turn was interrupted (its process died, recovery closed it)."""
    ended = await log.last_event(session_id, ("turn/end",))
    leaf = None
    if ended is not None and (last_snapshot is None or last_snapshot.seq < ended.seq):
        leaf = await log.last_event(session_id, LEAF_TYPES, before_seq=ended.seq)
    return shown_entry(last_snapshot, ended, leaf)


def shown_entry(
    last_snapshot: EventRecord | None, ended: EventRecord | None, leaf: EventRecord | None
) -> tuple[str | None, bool]:
    """`folder_entry` from the events it reads: the newest snapshot, the newest
    `turn/end`, and (when that turn ended after the snapshot) the newest of LEAF_TYPES
    before it."""
    if ended is None or (last_snapshot is not None and last_snapshot.seq > ended.seq):
        if last_snapshot is None:
            return None, False
        at = last_snapshot.data.get("at")
        return (at if isinstance(at, str) else None), False
    interrupted = ended.data.get("reason") == "interrupted"
    if leaf is None:
        return None, interrupted
    if leaf.type == "leaf/moved":
        to = leaf.data.get("to")
        return (to if isinstance(to, str) else None), interrupted
    return leaf.entry_id, interrupted
