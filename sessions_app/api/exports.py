"""Whole sessions, streamed: the Pi session file."""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Router

from sessions_app import access, selectors
from sessions_app.api.base import ERRORS, auth_user
from sessions_app.api.schemas import ErrorOut
from sessions_app.services import pi_io
from sessions_app.streaming import streamed

router = Router(tags=["sessions"])


_EXPORT_RESPONSES = {
    200: {
        "description": "The session as a Pi v3 session file (JSON lines)",
        "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
    }
}


@router.get(
    "/sessions/{session_id}/export",
    response={200: None, ERRORS: ErrorOut},
    openapi_extra={"responses": _EXPORT_RESPONSES},
)
def pi_export(request: HttpRequest, session_id: uuid.UUID) -> Any:
    session = access.session_for(auth_user(request), session_id)
    lines = pi_io.pi_export_lines(session, selectors.entry_stream(session))
    response = StreamingHttpResponse(
        streamed(lines, request), content_type="application/x-ndjson; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="strand-{session.id}.jsonl"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
