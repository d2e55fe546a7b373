"""The search page: entries across the sessions one may see (`selectors.entry_search`)."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from sessions_app.access import NotVisible
from sessions_app.bad_input import check_text
from sessions_app.selectors import entry_search as search
from sessions_app.services import ratelimit


def snippet_html(snippet: str, highlights: list[tuple[int, int]]) -> SafeString:
    """The snippet escaped, each match in a <mark>."""
    parts: list[str] = []
    at = 0
    for start, end in highlights:
        if start < at:
            continue
        parts.append(escape(snippet[at:start]))
        parts.append(f"<mark>{escape(snippet[start:end])}</mark>")
        at = end
    parts.append(escape(snippet[at:]))
    return mark_safe("".join(parts))  # noqa: S308  (every piece escaped above)


def _param(request: HttpRequest, name: str, limit: int = 500) -> str:
    value = request.GET.get(name, "")
    return check_text(value, f"the parameter {name!r}").strip()[: limit + 1]


def _day(value: str, name: str, *, end: bool = False) -> datetime | None:
    if not value:
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise search.BadSearch(f"{name}: give a date as YYYY-MM-DD") from None
    if end:  # the whole of the last day
        if day == date.max:
            return None
        day += timedelta(days=1)
    return datetime.combine(day, time.min, tzinfo=UTC)


@login_required
def search_page(request: HttpRequest) -> HttpResponse:
    form = {
        name: _param(request, name)
        for name in ("q", "role", "tool", "model", "since", "until", "session", "cursor")
    }
    form["errors"] = "1" if request.GET.get("errors") else ""
    context: dict[str, Any] = {"form": form, "roles": search.ROLES, "hits": [], "page": None}
    status = 200
    if form["q"]:
        ratelimit.rate_hit(request.user, "search")
        try:
            session_id = uuid.UUID(form["session"]) if form["session"] else None
        except ValueError:
            session_id = None
            context["error"] = "session: not a session id"
            status = 400
        if status == 200:
            try:
                page = search.entries_search(
                    request.user,
                    q=form["q"],
                    filters=search.SearchFilters(
                        role=form["role"] or None,
                        tool=form["tool"] or None,
                        errors_only=bool(form["errors"]),
                        model=form["model"] or None,
                        since=_day(form["since"], "since"),
                        until=_day(form["until"], "until", end=True),
                        session_id=session_id,
                    ),
                    cursor=form["cursor"] or None,
                )
            except (search.BadSearch, NotVisible) as exc:
                context["error"] = str(exc)
                status = 404 if isinstance(exc, NotVisible) else 400
            else:
                context["page"] = page
                context["hits"] = [
                    {
                        "hit": h,
                        "url": search.hit_url(h),
                        "snippet": snippet_html(h.snippet, h.highlights),
                    }
                    for h in page.hits
                ]
                if page.next_cursor:
                    more = request.GET.copy()
                    more["cursor"] = page.next_cursor
                    context["more_url"] = "?" + more.urlencode()
    return render(request, "search/search.html", context, status=status)
