"""Share links of a session: make, list, revoke (`sessions_app.services.shares`).

Only the session's owner (staff are refused with 403 on others' sessions; they revoke
links in the admin). The token is in the answer that makes the link, and never again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status

from sessions_app import access
from sessions_app.api.base import ERRORS, auth_user
from sessions_app.api.schemas import ErrorOut, ShareCreatedOut, ShareIn, ShareOut
from sessions_app.services import ratelimit, shares

router = Router(tags=["shares"])


@router.get("/sessions/{session_id}/shares", response={200: list[ShareOut], ERRORS: ErrorOut})
def share_list(request: HttpRequest, session_id: str) -> Any:
    """The session's links, newest first, revoked and expired ones included."""
    session = access.session_for(auth_user(request), session_id, write=True)
    return list(shares.shares_of(session)[:200])


@router.post("/sessions/{session_id}/shares", response={201: ShareCreatedOut, ERRORS: ErrorOut})
def share_create(request: HttpRequest, session_id: str, body: ShareIn) -> Any:
    """A read-only link to the session (or to the path ending at `branch`)."""
    session = access.session_for(auth_user(request), session_id, write=True)
    ratelimit.rate_hit(auth_user(request), "share")
    link, token = shares.share_create(
        session=session,
        by=auth_user(request),
        branch=body.branch,
        expires_in=timedelta(seconds=body.expires_in_s),
        tool_outputs=body.redact_tool_outputs,
        file_contents=body.redact_file_contents,
        system_prompt=body.redact_system_prompt,
        patterns=body.redact_patterns,
    )
    url = request.build_absolute_uri(shares.share_url(token))
    return Status(201, {**ShareOut.model_validate(link).model_dump(), "token": token, "url": url})


@router.delete("/sessions/{session_id}/shares/{share_id}", response={204: None, ERRORS: ErrorOut})
def share_revoke(request: HttpRequest, session_id: str, share_id: int) -> Any:
    """Revoke a link: it answers 404 from now on, and its open guest views are closed."""
    session = access.session_for(auth_user(request), session_id, write=True)
    ratelimit.rate_hit(auth_user(request), "revoke")
    shares.share_revoke(session=session, share_id=share_id)
    return Status(204, None)
