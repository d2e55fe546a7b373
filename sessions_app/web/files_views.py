"""The Files panel of the session page (the workspace at the branch shown) and the
download of one file.

The panel is a view like the other three (`?view=files`): it follows the branch shown
(`leaf`), a click in the tree and live updates redraw it like them, and every link in it
is a plain `href` as well as an htmx swap.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET

from projections.workspace import Manifest
from projections.workspace_files import files_page
from sessions_app import access, selectors
from sessions_app.errors import DomainError
from sessions_app.events import ENTRY_KEY_MAX
from sessions_app.models import Session
from sessions_app.render import highlight_file
from sessions_app.selectors.workspace import workspace_at
from sessions_app.store.blobs import blobs_get
from sessions_app.web.page_query import FILE_PATH_MAX, PageQuery

FILES_PAGE = 300  # files of the tree on one page; "more" reads the next
# A file's text is shown up to this many bytes, with a note when there is more.
FILE_SHOWN_BYTES = 200_000


def files_panel(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    """The workspace at `leaf`: a page of its tree, and the file `query.file` if it is
    there."""
    manifest: Manifest = workspace_at(session.id, leaf) or {}
    part: dict[str, Any] = {
        "files": files_page(manifest, offset=query.files_from or 0, limit=FILES_PAGE),
        "file_shown": None,
    }
    if query.file:
        part["file_shown"] = _file_shown(session, manifest, query.file)
    return part


def _file_shown(session: Session, manifest: Manifest, path: str) -> dict[str, Any]:
    state = manifest.get(path)
    if state is None:
        return {"path": path, "absent": True}
    content = blobs_get(owner_id=session.owner_id, shas=[state.sha256]).get(state.sha256)
    shown: dict[str, Any] = {"path": path, "size": state.size, "mode": state.mode}
    if content is None:
        return {**shown, "missing": True}
    text = _text(content[:FILE_SHOWN_BYTES], cut=len(content) > FILE_SHOWN_BYTES)
    if text is None:
        return {**shown, "binary": True}
    return {
        **shown,
        "html": highlight_file(path, text),
        "truncated": len(content) > FILE_SHOWN_BYTES,
        "shown_bytes": min(len(content), FILE_SHOWN_BYTES),
    }


def _text(content: bytes, *, cut: bool) -> str | None:
    """UTF-8 without NUL, or None (binary). A cut through a character at the bound is
    still text."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not (cut and exc.start >= len(content) - 3):
            return None
        text = content[: exc.start].decode("utf-8")
    return None if "\x00" in text else text


@login_required
@require_GET
def session_file_download(request: HttpRequest, session_id: Any, file_path: str) -> HttpResponse:
    """One file of the workspace at `?entry=` (default: the current leaf), as raw bytes."""
    try:
        session = access.session_for(request.user, session_id)
    except DomainError:
        raise Http404("no such session") from None
    entry = request.GET.get("entry") or session.leaf_entry_id
    if entry and (len(entry) > ENTRY_KEY_MAX or not selectors.entry_exists(session, entry)):
        raise Http404("no such entry in this session")
    manifest = workspace_at(session.id, entry or None) or {}
    state = manifest.get(file_path) if len(file_path) <= FILE_PATH_MAX else None
    if state is None:
        raise Http404("no such file in the workspace at that entry")
    content = blobs_get(owner_id=session.owner_id, shas=[state.sha256]).get(state.sha256)
    if content is None:
        raise Http404("the file's content is missing from the store")
    response = HttpResponse(content, content_type="application/octet-stream")
    name = file_path.rsplit("/", 1)[-1]
    response["Content-Disposition"] = (
        content_disposition_header(as_attachment=True, filename=name) or "attachment"
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Length"] = str(len(content))
    return response
