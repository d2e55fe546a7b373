"""What an upload to a workspace holds: the regular files of a tar (plain, gzip, bzip2 or
xz), a zip or separate files, each checked before anything is written.

Every member is refused, naming it, when its name could write outside the folder or is not
a name (an absolute path, a drive letter, a `..` part, a backslash, NUL, invalid UTF-8, a
component or path too long), when it is not a regular file or a folder (a symbolic or hard
link, a device, a FIFO), when it names a path twice (also as a file and a folder), or when
it is past the workspace quota (one file's bytes, all the files' bytes, their count, a
path's depth). Sizes are checked on what is read, not on what a header declares: a zip
member must inflate to exactly its declared size and no more than `MAX_RATIO` times its
compressed size, and a compressed tar is read through a counter that stops at the quota,
so no upload makes the server inflate more than the quota allows.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from runtime.tools import WorkspaceQuota
from sessions_app.errors import DomainError

# One component of a path, and a whole path, at most (Linux's NAME_MAX, and a bound well
# inside PATH_MAX once under a session's folder).
NAME_MAX_BYTES = 255
PATH_MAX_BYTES = 1024
# A zip member inflating to more than this many times its compressed size is a bomb
# (text compresses ten times or so; a run of zeros a thousand).
MAX_RATIO = 200
# Below this many bytes a member is never held to the ratio (tiny files compress oddly).
RATIO_FLOOR = 1024 * 1024
# Bytes of tar headers (and pax records) an archive may hold on top of its contents.
HEADER_ROOM = 8 * 1024 * 1024
READ_CHUNK = 64 * 1024


class UploadRefused(DomainError):
    """An upload refused before anything was written; `member` names what was refused."""

    code = "invalid"

    def __init__(self, message: str, member: str = "") -> None:
        super().__init__(message)
        self.member = member


class UploadTooLarge(UploadRefused):
    code = "too_large"


@dataclass(frozen=True, slots=True)
class UploadedFile:
    path: str
    mode: int
    content: bytes


@dataclass
class Budget:
    """What an upload may still add: the quota less what the workspace already holds."""

    quota: WorkspaceQuota
    bytes_left: int
    files_left: int

    def take(self, path: str, size: int) -> None:
        if self.quota.max_write_bytes and size > self.quota.max_write_bytes:
            raise UploadTooLarge(
                f"{_shown(path)} is {size} bytes, more than one file of the workspace may "
                f"hold ({self.quota.max_write_bytes})",
                path,
            )
        if self.quota.max_bytes:
            self.bytes_left -= size
            if self.bytes_left < 0:
                raise UploadTooLarge(
                    f"the upload passes the workspace's {self.quota.max_bytes} bytes at "
                    f"{_shown(path)}",
                    path,
                )
        if self.quota.max_entries:
            self.files_left -= 1
            if self.files_left < 0:
                raise UploadTooLarge(
                    f"the upload passes the workspace's {self.quota.max_entries} files at "
                    f"{_shown(path)}",
                    path,
                )


def member_path(raw: str | bytes, quota: WorkspaceQuota, *, folder: bool = False) -> str:
    """The workspace path a member's name stands for, or `UploadRefused` naming it ("" for
    a `folder` that is the archive's top, `.` or `./`)."""
    if isinstance(raw, bytes):
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UploadRefused(
                f"a member's name is not valid UTF-8: {raw[:200]!r}", repr(raw[:200])
            ) from None
    else:
        name = raw
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise UploadRefused(f"{_shown(name)}: the name is not valid UTF-8", name) from None
    if "\x00" in name:
        raise UploadRefused(f"{_shown(name)}: the name holds a NUL character", name)
    if "\\" in name:
        raise UploadRefused(f"{_shown(name)}: the name holds a backslash", name)
    if name.startswith("/"):
        raise UploadRefused(f"{_shown(name)}: an absolute path", name)
    if len(name) >= 2 and name[1] == ":" and name[0].isalpha():
        raise UploadRefused(f"{_shown(name)}: a drive letter", name)
    parts = [part for part in name.rstrip("/").split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UploadRefused(f"{_shown(name)}: a path that climbs out with ..", name)
    if not parts:
        if folder and name.strip("/") in ("", "."):
            return ""
        raise UploadRefused(f"{_shown(name)}: an empty name", name)
    if any(ord(c) < 32 for c in name):
        raise UploadRefused(f"{_shown(name)}: the name holds a control character", name)
    path = "/".join(parts)
    if any(len(part.encode()) > NAME_MAX_BYTES for part in parts):
        raise UploadRefused(f"{_shown(name)}: a part of the name is over 255 bytes", name)
    if len(path.encode()) > PATH_MAX_BYTES:
        raise UploadRefused(f"{_shown(name)}: the path is over {PATH_MAX_BYTES} bytes", name)
    if quota.max_depth and len(parts) > quota.max_depth:
        raise UploadRefused(
            f"{_shown(name)}: the path is more than {quota.max_depth} folders deep", name
        )
    return path


def _shown(name: str) -> str:
    return repr(name[:200])


# --- the kinds of upload -----------------------------------------------------------------


def archive_kind(head: bytes) -> str:
    """ "zip", "gzip", "bzip2", "xz" or "tar", by the first bytes; "" when none."""
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh"):
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "tar"
    return ""


def archive_files(body: IO[bytes], quota: WorkspaceQuota, budget: Budget) -> list[UploadedFile]:
    """The files of the archive `body` (seekable), each checked."""
    head = body.read(512)
    body.seek(0)
    kind = archive_kind(head)
    if kind == "zip":
        return _zip_files(body, quota, budget)
    if kind == "":
        raise UploadRefused("the upload is not a tar, tar.gz, tar.bz2, tar.xz or zip archive")
    with _unpacked(body, kind) as inner:
        return _tar_files(io.BufferedReader(_Counted(inner, budget)), quota, budget)


def _unpacked(body: IO[bytes], kind: str) -> io.BufferedIOBase:
    """`body` as it reads once decompressed."""
    if kind == "gzip":
        return gzip.GzipFile(fileobj=body, mode="rb")
    if kind == "bzip2":
        return bz2.BZ2File(body, mode="rb")
    if kind == "xz":
        return lzma.LZMAFile(body, mode="rb")
    return _Unclosed(body)


class _Unclosed(io.BufferedIOBase):
    """A plain tar's body, read as it is and left open (its owner closes it)."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner = inner

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        return self.inner.read(-1 if size is None else size)


class _Counted(io.RawIOBase):
    """A stream read through a bound: the quota's bytes plus room for headers, then
    `UploadTooLarge` (a compressed tar inflating past what it may unpack)."""

    def __init__(self, inner: io.BufferedIOBase, budget: Budget) -> None:
        self.inner = inner
        self.left = (budget.bytes_left + HEADER_ROOM) if budget.quota.max_bytes else None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self.inner.read(len(buffer))
        except (OSError, EOFError, lzma.LZMAError) as exc:
            raise UploadRefused(f"the archive cannot be read: {exc}") from None
        if self.left is not None:
            self.left -= len(data)
            if self.left < 0:
                raise UploadTooLarge("the archive unpacks to more than the workspace may hold")
        buffer[: len(data)] = data
        return len(data)


def _tar_files(stream: IO[bytes], quota: WorkspaceQuota, budget: Budget) -> list[UploadedFile]:
    out: list[UploadedFile] = []
    seen = _Names()
    try:
        archive = tarfile.open(  # noqa: SIM115 (closed by the `with` below)
            fileobj=stream, mode="r|", encoding="utf-8", errors="surrogateescape"
        )
    except (tarfile.TarError, UnicodeError) as exc:
        raise UploadRefused(f"the archive cannot be read: {exc}") from None
    with archive:
        for member in _members(archive):
            raw = member.name
            if member.issym() or member.islnk():
                raise UploadRefused(f"{_shown(raw)}: a link (links are never unpacked)", raw)
            if not (member.isreg() or member.isdir()):
                raise UploadRefused(
                    f"{_shown(raw)}: a device, FIFO or other special file (only files and "
                    "folders are unpacked)",
                    raw,
                )
            path = member_path(raw, quota, folder=member.isdir())
            if member.isdir():
                if path:
                    seen.folder(path, raw)
                continue
            seen.file(path, raw)
            budget.take(raw, member.size)
            handle = archive.extractfile(member)
            content = _read_exactly(handle, member.size, raw) if handle else b""
            out.append(UploadedFile(path, _mode(member.mode), content))
    return out


def _members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while True:
        try:
            member = archive.next()
        except UploadRefused:
            raise
        except (tarfile.TarError, UnicodeError, OSError, EOFError, ValueError) as exc:
            raise UploadRefused(f"the archive cannot be read: {exc}") from None
        if member is None:
            return
        yield member


def _zip_files(body: IO[bytes], quota: WorkspaceQuota, budget: Budget) -> list[UploadedFile]:
    try:
        archive = zipfile.ZipFile(body)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UploadRefused(f"the zip archive cannot be read: {exc}") from None
    out: list[UploadedFile] = []
    seen = _Names()
    with archive:
        infos = archive.infolist()
        if quota.max_entries and len(infos) > 2 * quota.max_entries:
            raise UploadTooLarge(f"the archive holds {len(infos)} members, more than it may")
        for info in infos:
            raw: str | bytes = info.orig_filename
            if not info.flag_bits & 0x800:  # not marked UTF-8: the name's own bytes
                raw = info.orig_filename.encode("cp437")
            name = member_path(raw, quota, folder=info.is_dir())
            kind = stat.S_IFMT(info.external_attr >> 16) if info.create_system == 3 else 0
            if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                what = "a link" if kind == stat.S_IFLNK else "a device, FIFO or special file"
                raise UploadRefused(f"{_shown(name)}: {what} (only files and folders)", name)
            if info.is_dir():
                if name:
                    seen.folder(name, name)
                continue
            seen.file(name, name)
            if info.flag_bits & 0x1:
                raise UploadRefused(f"{_shown(name)}: an encrypted member", name)
            budget.take(name, info.file_size)
            if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(
                info.compress_size, 1
            ):
                raise UploadTooLarge(
                    f"{_shown(name)} inflates more than {MAX_RATIO} times (a zip bomb)", name
                )
            try:
                with archive.open(info) as handle:
                    content = _read_exactly(handle, info.file_size, name)
            except UploadRefused:
                raise
            except (
                zipfile.BadZipFile,
                OSError,
                EOFError,
                NotImplementedError,
                RuntimeError,
            ) as exc:
                raise UploadRefused(f"{_shown(name)} cannot be read: {exc}", name) from None
            mode = (info.external_attr >> 16) & 0o777 if info.create_system == 3 else 0o644
            out.append(UploadedFile(name, _mode(mode or 0o644), content))
    return out


def _read_exactly(handle: IO[bytes], size: int, name: str) -> bytes:
    """`size` bytes of `handle`, refused when it holds more or fewer."""
    chunks: list[bytes] = []
    got = 0
    while got <= size:
        chunk = handle.read(min(READ_CHUNK, size + 1 - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    if got != size:
        more = "more" if got > size else "less"
        raise UploadTooLarge(
            f"{_shown(name)} holds {more} than the {size} bytes its header declares", name
        )
    return b"".join(chunks)


def _mode(mode: int) -> int:
    """A file's permission bits as unpacked: its owner may always read and write it; no
    set-id or sticky bits."""
    return (mode & 0o777) | 0o600


class _Names:
    """The paths an upload names so far: a path twice, or a file where a folder is (or the
    other way round), is refused."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.folders: set[str] = set()

    def folder(self, path: str, raw: str) -> None:
        if path in self.files:
            raise UploadRefused(f"{_shown(raw)}: a folder where the upload has a file", raw)
        self._parents(path, raw)
        self.folders.add(path)

    def file(self, path: str, raw: str) -> None:
        if path in self.files:
            raise UploadRefused(f"{_shown(raw)}: the upload names this file twice", raw)
        if path in self.folders:
            raise UploadRefused(f"{_shown(raw)}: a file where the upload has a folder", raw)
        self._parents(path, raw)
        self.files.add(path)

    def _parents(self, path: str, raw: str) -> None:
        parts = path.split("/")
        for end in range(1, len(parts)):
            parent = "/".join(parts[:end])
            if parent in self.files:
                raise UploadRefused(
                    f"{_shown(raw)}: its folder {parent!r} is a file of the upload", raw
                )
            self.folders.add(parent)
