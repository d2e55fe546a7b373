"""Usage and failures (`GET /api/usage`): yours, or (staff) everyone's or one user's, read
from the projector's rollups (`selectors.usage`)."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from sessions_app.api.base import ERRORS, auth_user
from sessions_app.api.schemas import ErrorOut
from sessions_app.selectors import usage

router = Router(tags=["usage"])


class UsageIn(Schema):
    user: str | None = Field(None, max_length=150, description="One user's usage (staff)")
    since: date | None = Field(None, description="The first day (the server's time zone)")
    until: date | None = Field(None, description="The last day, included")


@router.get("/usage", response={200: dict[str, Any], ERRORS: ErrorOut})
def usage_get(request: HttpRequest, params: Query[UsageIn]) -> Any:
    """Tokens and cost per day, model and session (the costliest), tool calls and errors
    per tool, how turns ended, provider faults by kind, latency percentiles per model."""
    report = usage.usage_report(
        auth_user(request), username=params.user, since=params.since, until=params.until
    )
    return usage.report_json(report)
