"""The workspace's doors on the pages: the whole workspace at an entry as a tar archive,
and an upload of files or an archive into it (the Files panel's form,
`sessions/_workspace_upload.html`)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from runtime.errors import AgentError
from sessions_app import selectors
from sessions_app.errors import DomainError
from sessions_app.limits import ENTRY_ID_MAX
from sessions_app.selectors.workspace import workspace_at
from sessions_app.services import ratelimit
from sessions_app.services.upload import workspace_upload
from sessions_app.services.workspace_transfer import uploaded_files, workspace_tar_response
from sessions_app.web.views import _session_or_404


@login_required
@require_GET
def session_workspace_tar(request: HttpRequest, session_id: Any) -> HttpResponseBase:
    """The workspace at `?entry=` (default: the current leaf) as a streamed tar; an
    unknown entry is a 400 with a JSON body, as the API answers."""
    session = _session_or_404(request, session_id)
    entry = request.GET.get("entry") or session.leaf_entry_id
    if entry is not None and (
        len(entry) > ENTRY_ID_MAX or not selectors.entry_exists(session, entry)
    ):
        detail = f"{entry[:ENTRY_ID_MAX]!r} is not an entry of this session"
        return JsonResponse({"error": "invalid", "detail": detail}, status=400)
    manifest = workspace_at(session.id, entry) or {}
    try:
        return workspace_tar_response(request, session, entry, manifest)
    except DomainError as exc:
        return JsonResponse({"error": exc.code, "detail": str(exc)}, status=404)


@login_required
@require_POST
def session_workspace_upload(request: HttpRequest, session_id: Any) -> HttpResponse:
    """The upload form: files or an archive into the workspace at the current leaf; what
    it did or why it was refused is a message on the session's page."""
    session = _session_or_404(request, session_id, write=True)
    ratelimit.rate_hit(request.user, "upload")
    try:
        done = workspace_upload(session=session, files=uploaded_files(request, session))
    except (DomainError, AgentError) as exc:
        messages.error(request, f"Upload refused: {exc}")
    else:
        messages.success(request, f"Uploaded {done.files} file(s) into the workspace.")
    return redirect(reverse("session", args=[session.id]))
