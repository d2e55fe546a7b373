"""Search over the entries you may see (`GET /api/search`): yours, or every session's for
staff. The rules of a query are `selectors.entry_search`'s."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from sessions_app.api.base import ERRORS, auth_user
from sessions_app.api.schemas import ErrorOut
from sessions_app.errors import DomainError
from sessions_app.selectors import entry_search as search
from sessions_app.services import ratelimit

router = Router(tags=["search"])


class SearchIn(Schema):
    q: str = Field(..., description='Words and "quoted phrases"; each must occur')
    role: str | None = Field(None, max_length=32, description=", ".join(search.ROLES))
    tool: str | None = Field(None, max_length=128, description="A tool's name")
    errors: bool = Field(False, description="Failed tool results only")
    model: str | None = Field(None, max_length=128, description="The replying model")
    since: datetime | None = None
    until: datetime | None = None
    session: uuid.UUID | None = Field(None, description="One session only")
    limit: int = Field(20, ge=1, le=search.LIMIT_MAX)
    cursor: str | None = Field(None, max_length=300, description="next_cursor of a page")


class SearchHitOut(Schema):
    session_id: uuid.UUID
    session_title: str
    entry_id: str
    role: str
    snippet: str
    highlights: list[tuple[int, int]] = Field(..., description="(start, end) of each match")
    timestamp: datetime
    tool_name: str
    is_error: bool
    model: str
    url: str = Field(..., description="The session page at this entry")


class SearchPageOut(Schema):
    items: list[SearchHitOut]
    next_cursor: str | None
    scope: str = Field(..., description='"all", or "recent" for a query of short words only')


def _utc(moment: datetime | None, name: str) -> datetime | None:
    if moment is None:
        return None
    try:
        aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        return aware.astimezone(UTC)
    except (OverflowError, ValueError):
        raise DomainError(f"{name}: the time is out of range") from None


def search_page(request_user: Any, params: SearchIn) -> search.SearchPage:
    return search.entries_search(
        request_user,
        q=params.q,
        filters=search.SearchFilters(
            role=params.role or None,
            tool=params.tool or None,
            errors_only=params.errors,
            model=params.model or None,
            since=_utc(params.since, "since"),
            until=_utc(params.until, "until"),
            session_id=params.session,
        ),
        cursor=params.cursor or None,
        limit=params.limit,
    )


@router.get("/search", response={200: SearchPageOut, ERRORS: ErrorOut})
def entries_search(request: HttpRequest, params: Query[SearchIn]) -> Any:
    """Entries that match a query, newest first: each the message, tool call or tool result
    that says it, with a snippet and a link to the session at that entry."""
    user = auth_user(request)
    ratelimit.rate_hit(user, "search")
    page = search_page(user, params)
    return {
        "items": [
            {
                "session_id": h.session_id,
                "session_title": h.session_title,
                "entry_id": h.entry_id,
                "role": h.role,
                "snippet": h.snippet,
                "highlights": h.highlights,
                "timestamp": h.timestamp,
                "tool_name": h.tool_name,
                "is_error": h.is_error,
                "model": h.model,
                "url": search.hit_url(h),
            }
            for h in page.hits
        ],
        "next_cursor": page.next_cursor,
        "scope": page.scope,
    }
