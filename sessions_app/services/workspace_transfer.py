"""The workspace over HTTP, for the API's doors and the page's alike: the workspace at an
entry as a streamed tar response, and the checked files a request uploads (multipart files,
a multipart archive, or an archive as the raw body, spooled past a bound)."""

from __future__ import annotations

import tempfile
from typing import IO, Any

from django.conf import settings
from django.http import HttpRequest, StreamingHttpResponse

from sessions_app.models import Session
from sessions_app.selectors.workspace_tar import workspace_tar, workspace_tar_check
from sessions_app.services.upload import upload_archive_files, upload_named_files
from sessions_app.services.upload_archive import UploadedFile, UploadTooLarge
from sessions_app.streaming import streamed

# Bytes of a raw body held in memory while it is read; past it, a temporary file.
SPOOL_BYTES = 1024 * 1024


def workspace_tar_response(
    request: HttpRequest, session: Session, at: str | None, manifest: Any
) -> StreamingHttpResponse:
    """The streamed tar of `manifest`, the workspace of `session` at `at` (the page's
    download too)."""
    workspace_tar_check(owner_id=session.owner_id, manifest=manifest)
    chunks = workspace_tar(owner_id=session.owner_id, manifest=manifest)
    response = StreamingHttpResponse(streamed(chunks, request), content_type="application/x-tar")
    name = f"strand-{str(session.id)[:8]}-{at or 'root'}.tar"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "no-store"
    return response


def uploaded_files(request: HttpRequest, session: Session) -> list[UploadedFile]:
    """The checked files a request uploads (the page's form too)."""
    if request.content_type == "multipart/form-data":
        archive = request.FILES.get("archive")
        if archive is not None:
            return upload_archive_files(session, archive)
        named = request.FILES.getlist("files")
        folder = str(request.POST.get("folder", ""))
        return upload_named_files(session, folder, [(f.name or "", f, f.size or 0) for f in named])
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        _copy_body(request, spool)
        spool.seek(0)
        return upload_archive_files(session, spool)  # type: ignore[arg-type]


def _copy_body(request: HttpRequest, into: IO[bytes]) -> None:
    limit = int(settings.STRAND_MAX_UPLOAD_BYTES)
    copied = 0
    while chunk := request.read(64 * 1024):
        copied += len(chunk)
        if copied > limit:
            raise UploadTooLarge(f"an upload is at most {limit} bytes")
        into.write(chunk)
