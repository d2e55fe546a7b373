"""The workspace at an entry (DESIGN §11): its files a page at a time, one file, the whole
workspace as a streamed tar archive; and an upload of files or an archive into it."""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from sessions_app import access
from sessions_app.api.base import ERRORS, auth_user, leaf_or_current
from sessions_app.api.cursors import cursor_decode, cursor_encode
from sessions_app.api.schemas import ErrorOut
from sessions_app.errors import DomainError
from sessions_app.limits import ENTRY_ID_MAX
from sessions_app.models import Session
from sessions_app.selectors.workspace import workspace_at
from sessions_app.services import ratelimit
from sessions_app.services.upload import (
    workspace_upload,
)
from sessions_app.services.workspace_transfer import uploaded_files, workspace_tar_response
from sessions_app.store.blobs import blobs_get

router = Router(tags=["files"])

FILES_PAGE_MAX = 1000
# A file's text is returned up to this many bytes; `truncated` says when there is more.
FILE_TEXT_MAX = 1_000_000
CURSOR_MAX = 500
PATH_MAX = 4096


class FilesIn(Schema):
    entry: str | None = Field(
        None, max_length=ENTRY_ID_MAX, description="An entry (default: the current leaf)"
    )
    limit: int = Field(200, ge=1, le=FILES_PAGE_MAX)
    cursor: str | None = Field(None, max_length=CURSOR_MAX, description="next_cursor of a page")


class FileIn(Schema):
    entry: str | None = Field(
        None, max_length=ENTRY_ID_MAX, description="An entry (default: the current leaf)"
    )


class FileOut(Schema):
    path: str
    size: int
    mode: int
    sha256: str


class FilesOut(Schema):
    entry: str | None = Field(..., description="The entry whose workspace this is")
    total: int = Field(..., description="Files in the workspace there")
    files: list[FileOut]
    next_cursor: str | None


class FileContentOut(FileOut):
    entry: str | None
    binary: bool = Field(..., description="Not UTF-8 text: `text` is null")
    text: str | None
    truncated: bool = Field(..., description=f"Only the first {FILE_TEXT_MAX} bytes are shown")


class FileNotFound(DomainError):
    code = "not_found"


def _manifest(session: Session, entry: str | None) -> tuple[str | None, Any]:
    at = leaf_or_current(session, entry)
    manifest = workspace_at(session.id, at)
    return at, manifest or {}


@router.get("/sessions/{session_id}/files", response={200: FilesOut, ERRORS: ErrorOut})
def files_list(request: HttpRequest, session_id: uuid.UUID, page: Query[FilesIn]) -> Any:
    """The files of the workspace at `entry`, by path, `limit` at a time."""
    session = access.session_for(auth_user(request), session_id)
    entry, offset = page.entry, 0
    if page.cursor:
        _, fields = cursor_decode(page.cursor, "files")
        entry, offset = fields["entry"], max(int(fields["offset"]), 0)
    at, manifest = _manifest(session, entry)
    paths = sorted(manifest)
    chunk = paths[offset : offset + page.limit]
    end = offset + len(chunk)
    return {
        "entry": at,
        "total": len(paths),
        "files": [_file(path, manifest[path]) for path in chunk],
        "next_cursor": cursor_encode("files", entry=at, offset=end) if end < len(paths) else None,
    }


@router.get(
    "/sessions/{session_id}/files/{path:file_path}",
    response={200: FileContentOut, ERRORS: ErrorOut},
)
def file_get(
    request: HttpRequest, session_id: uuid.UUID, file_path: str, page: Query[FileIn]
) -> Any:
    """One file of the workspace at `entry`: its text (up to a bound) or that it is binary."""
    session = access.session_for(auth_user(request), session_id)
    if len(file_path) > PATH_MAX:
        raise DomainError(f"a path is at most {PATH_MAX} characters")
    at, manifest = _manifest(session, page.entry)
    state = manifest.get(file_path)
    if state is None:
        raise FileNotFound(f"no file {file_path[:200]!r} in the workspace at that entry")
    content = blobs_get(owner_id=session.owner_id, shas=[state.sha256]).get(state.sha256)
    if content is None:
        raise FileNotFound(f"the content of {file_path[:200]!r} is missing from the store")
    shown = content[:FILE_TEXT_MAX]
    try:
        text: str | None = shown.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A cut through a character at the bound is still text.
        cut = len(content) > FILE_TEXT_MAX and exc.start >= len(shown) - 3
        text = shown[: exc.start].decode("utf-8") if cut else None
    if text is not None and "\x00" in text:
        text = None
    return {
        **_file(file_path, state),
        "entry": at,
        "binary": text is None,
        "text": text,
        "truncated": text is not None and len(content) > FILE_TEXT_MAX,
    }


_TAR_RESPONSES = {
    200: {
        "description": "The workspace at the entry as a tar archive (regular files only)",
        "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.get(
    "/sessions/{session_id}/workspace.tar",
    response={200: None, ERRORS: ErrorOut},
    openapi_extra={"responses": _TAR_RESPONSES},
)
def workspace_archive(request: HttpRequest, session_id: uuid.UUID, page: Query[FileIn]) -> Any:
    """The whole workspace at `entry` (default: the current leaf), streamed as a tar."""
    session = access.session_for(auth_user(request), session_id)
    at, manifest = _manifest(session, page.entry)
    return workspace_tar_response(request, session, at, manifest)


def _file(path: str, state: Any) -> dict[str, Any]:
    return {"path": path, "size": state.size, "mode": state.mode, "sha256": state.sha256}


# --- upload ------------------------------------------------------------------------------


class UploadOut(Schema):
    entry: str | None = Field(..., description="The entry the upload is recorded at")
    files: int = Field(..., description="Files written")
    bytes: int
    seq: int = Field(..., description="The seq of the `upload` snapshot")


_UPLOAD_BODY = {
    "content": {
        "application/x-tar": {"schema": {"type": "string", "format": "binary"}},
        "application/gzip": {"schema": {"type": "string", "format": "binary"}},
        "application/zip": {"schema": {"type": "string", "format": "binary"}},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "properties": {
                    "archive": {"type": "string", "format": "binary"},
                    "files": {"type": "array", "items": {"type": "string", "format": "binary"}},
                    "folder": {"type": "string"},
                },
            }
        },
    }
}


@router.post(
    "/sessions/{session_id}/files",
    response={200: UploadOut, ERRORS: ErrorOut},
    openapi_extra={"requestBody": _UPLOAD_BODY},
)
def files_upload(request: HttpRequest, session_id: uuid.UUID) -> Any:
    """Write files into the workspace at the current leaf, recorded as one `upload`
    snapshot there: a tar (plain, .gz, .bz2, .xz) or zip as the body, or multipart
    `archive`, or multipart `files` (into `folder`). Refused whole, naming the member, for
    links, devices, paths that leave the folder, bad names and sizes past the quota; 409
    while a turn runs."""
    user = auth_user(request)
    ratelimit.rate_hit(user, "upload")
    session = access.session_for(user, session_id, write=True)
    done = workspace_upload(session=session, files=uploaded_files(request, session))
    return {"entry": done.entry, "files": done.files, "bytes": done.bytes, "seq": done.seq}
