"""Sessions: the list, one session, creating (also from a Pi file), renaming, deleting, forking."""

from __future__ import annotations

import base64
import binascii
import tempfile
import uuid
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Query, Router
from ninja.responses import Status

from sessions_app import access, agent, selectors, services, store, workspaces
from sessions_app.api.base import ERRORS, BadInput, auth_user
from sessions_app.api.schemas import (
    TITLE_MAX,
    ErrorOut,
    ForkIn,
    ImportOut,
    SessionFilterIn,
    SessionIn,
    SessionOut,
    SessionPageOut,
    SessionRenameIn,
)
from sessions_app.errors import DomainError
from sessions_app.models import Session
from sessions_app.services import pi_io, ratelimit

router = Router(tags=["sessions"])


def max_import_bytes() -> int:
    return int(getattr(settings, "STRAND_MAX_IMPORT_BYTES", 50 * 1024 * 1024))


def _encode_cursor(session: Session) -> str:
    raw = f"{session.created_at.isoformat()}|{session.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment, _, sid = raw.partition("|")
        parsed = datetime.fromisoformat(moment)
        if parsed.tzinfo is None:
            raise ValueError("naive time")
        return _utc(parsed, "cursor"), uuid.UUID(sid)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise DomainError("the cursor is not one this API gave out") from None


def _utc(moment: datetime, name: str) -> datetime:
    """A time as UTC (a time without a zone is taken as UTC), or 422 when it has none."""
    try:
        aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        return aware.astimezone(UTC)
    except (OverflowError, ValueError):
        raise DomainError(f"{name}: the time is out of range") from None


@router.get("/sessions", response={200: SessionPageOut, ERRORS: ErrorOut})
def session_list(request: HttpRequest, filters: Query[SessionFilterIn]) -> Any:
    """Sessions you may see, newest first: yours, or every session for staff."""
    if filters.q:
        ratelimit.rate_hit(auth_user(request), "search")
    found = selectors.session_page(
        auth_user(request),
        title=filters.q,
        owner=filters.owner,
        parent=filters.parent,
        created_after=_utc(filters.created_after, "created_after")
        if filters.created_after
        else None,
        created_before=_utc(filters.created_before, "created_before")
        if filters.created_before
        else None,
        after=_decode_cursor(filters.cursor) if filters.cursor else None,
        limit=filters.limit,
    )
    last = found.items[-1] if found.more and found.items else None
    return {"items": found.items, "next_cursor": _encode_cursor(last) if last else None}


@router.post("/sessions", response={201: SessionOut, ERRORS: ErrorOut})
def session_create(request: HttpRequest, body: SessionIn) -> Any:
    user = access.signed_in(auth_user(request))
    ratelimit.rate_hit(user, "session")
    preset = access.check_preset(body.preset)
    session = services.session_create(
        owner=user, title=body.title, cwd=workspaces.cwd_for(user, body.cwd), preset=preset
    )
    return Status(201, session)


# The Pi import comes before /sessions/{session_id}, whose pattern would take its path.

_IMPORT_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "name": {"type": "string", "maxLength": TITLE_MAX},
                },
            }
        }
    },
}


@router.post(
    "/sessions/import",
    response={201: ImportOut, ERRORS: ErrorOut},
    openapi_extra={"requestBody": _IMPORT_BODY},
)
def pi_import(request: HttpRequest) -> Any:
    """Import a Pi session file (any version) as a new session of yours: all or nothing.
    Multipart upload: `file`, and optionally `name` (the title)."""
    user = access.signed_in(auth_user(request))
    limit = max_import_bytes()
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise BadInput("the Content-Length header is not a number") from None
    if declared > limit + 64 * 1024:  # the file plus the multipart framing
        raise store.TooLarge(f"a Pi file is at most {limit} bytes")
    if not (request.content_type or "").startswith("multipart/form-data"):
        raise BadInput("send the file as multipart/form-data, field 'file'")
    ratelimit.rate_hit(user, "import")
    upload = request.FILES.get("file")
    if upload is None:
        raise BadInput("no file: send it in the multipart field 'file'")
    name = request.POST.get("name", "")
    if len(name) > TITLE_MAX or "\x00" in name:
        raise DomainError(f"name: at most {TITLE_MAX} characters, no NUL")
    with tempfile.TemporaryFile() as copy:
        # A file of our own, so that the import can read it twice (ids first, then entries).
        for chunk in upload.chunks():
            copy.write(chunk)
            if copy.tell() > limit:
                raise store.TooLarge(f"a Pi file is at most {limit} bytes")
        copy.seek(0)
        result = pi_io.pi_import(source=copy, owner=user, name=name)
    return Status(
        201,
        {
            "session": result.session,
            "entries": result.entries,
            "warnings": [str(w) for w in result.warnings],
        },
    )


@router.get("/sessions/{session_id}", response={200: SessionOut, ERRORS: ErrorOut})
def session_get(request: HttpRequest, session_id: uuid.UUID) -> Any:
    session = access.session_for(auth_user(request), session_id)
    session.turn_status = selectors.session_turn_state(session).status  # type: ignore[attr-defined]
    return session


@router.patch("/sessions/{session_id}", response={200: SessionOut, ERRORS: ErrorOut})
def session_rename(request: HttpRequest, session_id: uuid.UUID, body: SessionRenameIn) -> Any:
    user = auth_user(request)
    session = access.session_for(user, session_id, write=True)
    ratelimit.rate_hit(user, "rename")
    return services.session_rename(session=session, title=body.title)


@router.delete("/sessions/{session_id}", response={204: None, ERRORS: ErrorOut})
def session_delete(request: HttpRequest, session_id: uuid.UUID) -> Any:
    """Delete a session and its whole history (audited). A running turn is cancelled first
    and waited for; 409 only when it does not stop in time."""
    user = auth_user(request)
    session = access.session_for(user, session_id, write=True)
    ratelimit.rate_hit(user, "delete")
    agent.agent_stop_turn(session)
    services.session_delete(session=session, by=user)
    return Status(204, None)


@router.post("/sessions/{session_id}/fork", response={201: SessionOut, ERRORS: ErrorOut})
def session_fork(request: HttpRequest, session_id: uuid.UUID, body: ForkIn) -> Any:
    """A new session of yours holding the root → `entry_id` path of this one."""
    user = auth_user(request)
    session = access.session_for(user, session_id, write=True)
    ratelimit.rate_hit(user, "fork")
    fork = services.session_fork(
        session=session, entry_id=body.entry_id, owner=user, title=body.title
    )
    return Status(201, fork)
