"""Whole sessions, streamed: the Pi session file, and the OTLP/JSON file of GenAI spans."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Router

from sessions_app import access, selectors
from sessions_app.api.base import ERRORS, auth_user, check_entry
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


_OTLP_RESPONSES = {
    200: {
        "description": (
            "The session's finished turns (or those of the branch to `leaf`) as OpenTelemetry "
            "GenAI spans: an OTLP/JSON ExportTraceServiceRequest"
        ),
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}


@router.get(
    "/sessions/{session_id}/export.otlp.json",
    response={200: None, ERRORS: ErrorOut},
    openapi_extra={"responses": _OTLP_RESPONSES},
)
def otlp_export(
    request: HttpRequest,
    session_id: uuid.UUID,
    leaf: str | None = None,
    content: bool = True,
) -> Any:
    """Every finished turn as an `invoke_agent` span with its `chat` and `execute_tool`
    spans (ids derived from the session and seqs: a second export gives the same ids).
    `leaf`: only the turns of the branch to that entry. `content=false`: no prompts,
    messages, arguments or results, only structure, timings and usage."""
    session = access.session_for(auth_user(request), session_id)
    if leaf is not None:
        check_entry(session, leaf)
    chunks = selectors.otlp_export_chunks(
        session,
        leaf=leaf,
        capture_content=content,
        max_chars=settings.STRAND_OTLP_ATTRIBUTE_CHARS,
    )
    response = StreamingHttpResponse(
        streamed(chunks, request), content_type="application/json; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="strand-{session.id}.otlp.json"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
