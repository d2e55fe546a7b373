"""The workspace at an entry as a tar archive, made a batch of files at a time.

Only regular files are in it, each with its recorded mode and time, under its manifest path
(relative, no `..`, no leading `/`: the names `safe_member_name` lets through, so that
unpacking it can write nowhere but in the folder it is unpacked in). Contents are read from
the owner's blob store `TAR_BATCH_FILES` files or `TAR_BATCH_BYTES` bytes at a time, and each
batch is handed on as soon as it is packed: the memory of one batch, whatever the size of the
workspace.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator, Sequence

from projections.workspace import Manifest, WorkspaceFile
from sessions_app.errors import DomainError
from sessions_app.store.blobs import blobs_get, blobs_missing

TAR_BATCH_FILES = 200
TAR_BATCH_BYTES = 8 * 1024 * 1024


class ContentsMissing(DomainError):
    """A file of the workspace whose content is not in the store (what `verify` reports)."""

    code = "not_found"


def safe_member_name(path: str) -> bool:
    """Whether `path` is a name a tar member may have: relative, `/`-separated, with no
    empty, `.` or `..` part, no backslash and no NUL."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def workspace_tar_check(*, owner_id: int, manifest: Manifest) -> None:
    """Refuse (before a byte is sent) a workspace whose contents the store lacks."""
    missing = blobs_missing(owner_id=owner_id, shas=[f.sha256 for f in manifest.values()])
    if missing:
        raise ContentsMissing(
            f"the contents of {len(missing)} file(s) of that workspace are missing from the store"
        )


def workspace_tar(*, owner_id: int, manifest: Manifest) -> Iterator[bytes]:
    """The tar archive of `manifest` (path → file), a batch of files at a time."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w|", format=tarfile.PAX_FORMAT) as archive:
        for batch in _batches([(p, f) for p, f in manifest.items() if safe_member_name(p)]):
            contents = blobs_get(owner_id=owner_id, shas=[f.sha256 for _, f in batch])
            for path, state in batch:
                content = contents.get(state.sha256)
                if content is None:
                    raise ContentsMissing(f"the content of {path[:200]!r} left the store")
                archive.addfile(_member(path, state, len(content)), io.BytesIO(content))
            del contents
            yield _drain(buffer)
    yield _drain(buffer)


def _batches(
    files: Sequence[tuple[str, WorkspaceFile]],
) -> Iterator[list[tuple[str, WorkspaceFile]]]:
    batch: list[tuple[str, WorkspaceFile]] = []
    size = 0
    for item in files:
        if batch and (len(batch) >= TAR_BATCH_FILES or size + item[1].size > TAR_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += item[1].size
    if batch:
        yield batch


def _member(path: str, state: WorkspaceFile, size: int) -> tarfile.TarInfo:
    member = tarfile.TarInfo(path)
    member.type = tarfile.REGTYPE
    member.size = size
    member.mode = state.mode & 0o777
    member.mtime = state.mtime_ns // 1_000_000_000
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    return member


def _drain(buffer: io.BytesIO) -> bytes:
    data = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return data
