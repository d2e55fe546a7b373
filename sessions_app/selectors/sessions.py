"""Sessions: the list a user sees (the home page's rows, the API's pages), one session by
id, and a session read again after a write."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL

from sessions_app import access
from sessions_app.models import OBSERVED, Session
from sessions_app.search import message_text_vector
from sessions_app.selectors.turns import turn_states

LIST_LIMIT = 200  # rows of the home page's list


@dataclass(frozen=True, slots=True)
class SessionRow:
    session: Session
    state: str  # idle, running, interrupted, error, aborted
    owner_name: str | None  # set when the viewer is not the owner (staff)


# Postgres full-text search over the sessions the viewer may see: the title, or the text of
# any user or assistant message. Unindexed on purpose: a GIN index on the message text made
# every append of a message about three times slower (to_tsvector at insert time), which
# the append path cannot afford.
#
# The message subquery reads only the entries of the sessions the viewer may see
# (`access.visible_sessions`, inside it), and matches their text only after that: `OFFSET
# 0` keeps the planner from moving the match below the viewer's filter. Filtered outside,
# it ran to_tsvector over every entry of every session: one user's search cost what all
# users had stored (6 s at 520,000 entries for someone with 6), and one entry to_tsvector
# refuses (a text of more than 1 MB of words) failed everyone's search.
_TEXT_QUERY = "websearch_to_tsquery('english', %s)"


def _search_sql(visible_sql: str) -> str:
    return f"""(
    to_tsvector('english', sessions_app_session.title) @@ {_TEXT_QUERY}
    OR sessions_app_session.id IN (
        SELECT seen.session_id FROM (
            SELECT e.session_id, e.data FROM sessions_app_entry e
            WHERE e.session_id IN ({visible_sql})
              AND e.type = 'message'
              AND e.data->'message'->>'role' IN ('user', 'assistant')
            OFFSET 0
        ) seen
        WHERE {message_text_vector("seen")} @@ {_TEXT_QUERY}
    )
)"""


def _matching(user: Any, query: str) -> RawSQL:
    visible_sql, visible_params = access.visible_sessions(user).values("id").query.sql_with_params()
    return RawSQL(
        _search_sql(visible_sql),
        [query, *visible_params, query],
        output_field=BooleanField(),
    )


def session_rows(user: Any, *, query: str = "") -> list[SessionRow]:
    """The sessions `user` may see, latest activity first; matching `query` when given."""
    sessions = access.visible_sessions(user)
    if query:
        sessions = sessions.filter(_matching(user, query))
    page = list(sessions.select_related("owner").order_by("-updated_at")[:LIST_LIMIT])
    states = turn_states([s.id for s in page])
    return [
        SessionRow(
            session=s,
            state=states[s.id].label,
            owner_name=None if s.owner_id == user.pk else s.owner.get_username(),
        )
        for s in page
    ]


@dataclass(frozen=True, slots=True)
class SessionPage:
    items: list[Session]
    more: bool  # sessions older than the last item follow


def session_page(
    user: Any,
    *,
    title: str | None = None,
    owner: str | None = None,
    parent: uuid.UUID | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    after: tuple[datetime, uuid.UUID] | None = None,
    limit: int,
) -> SessionPage:
    """Sessions `user` may see, newest first (by creation, then id), at most `limit`, after
    the (created_at, id) of the previous page's last item."""
    sessions = access.visible_sessions(user)
    if title:
        sessions = sessions.filter(title__icontains=title)
    if owner:
        sessions = sessions.filter(owner__username=owner)
    if parent:
        sessions = sessions.filter(parent_id=parent)
    if created_after:
        sessions = sessions.filter(created_at__gt=created_after)
    if created_before:
        sessions = sessions.filter(created_at__lt=created_before)
    if after is not None:
        created, sid = after
        sessions = sessions.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=sid))
    found = list(sessions.select_related("owner").order_by("-created_at", "-id")[: limit + 1])
    return SessionPage(items=found[:limit], more=len(found) > limit)


def visible_session_id(user: Any, session_id: str) -> str | None:
    """The id of the session if `user` may see it, by the rule `access.session_for` applies.

    The id alone: a websocket's handshake needs no more, and compiling `session_for`'s query
    (the session joined to its owner) was the largest share of a handshake's CPU (py-spy
    over a 300-viewer storm; this one takes ~40% less)."""
    found = access.visible_sessions(user).filter(id=session_id).values_list("id", flat=True)
    first = found.first()
    return None if first is None else str(first)


def session_by_id(session_id: uuid.UUID) -> Session | None:
    """Any session, whoever owns it (for commands run by operators)."""
    return Session.objects.filter(id=session_id).select_related("owner").first()


def sessions_by_age() -> list[Session]:
    """Every session, oldest first (for commands run by operators)."""
    return list(Session.objects.order_by("created_at"))


def session_reloaded(session: Session) -> Session:
    """`session` as stored now (its leaf, counters and title after a write)."""
    session.refresh_from_db()
    return session


def session_is_observed(session: Session) -> bool:
    """Whether the session records another agent's OpenTelemetry spans (`observed:otlp`):
    nothing runs in it, so it has no composer and takes no messages."""
    return session.origin == OBSERVED
