"""Who may see and change a session: the one place that decides.

A session is visible to its owner and to staff. Its owner may change it; staff may only
read it. Everyone else is told the session does not exist (not that it is forbidden), so
that ids of other people's sessions leak nothing. The API, the pages, the websockets, search
and exports all call these functions.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet

from sessions_app.models import Session
from sessions_app.store import StoreError


class NotVisible(StoreError):
    """No such session, or not one this user may see (the two are not told apart)."""

    code = "not_found"


class ReadOnly(StoreError):
    """A user who may see the session but not change it (staff)."""

    code = "forbidden"


class SignInRequired(StoreError):
    code = "unauthorized"


def _authenticated(user: Any) -> bool:
    return bool(user is not None and getattr(user, "is_authenticated", False))


def visible_sessions(user: Any) -> QuerySet[Session]:
    """The sessions `user` may see: their own, or every session for staff."""
    if not _authenticated(user):
        return Session.objects.none()
    if user.is_staff:
        return Session.objects.all()
    return Session.objects.filter(owner_id=user.pk)


def can_see(user: Any, session: Session) -> bool:
    return _authenticated(user) and (session.owner_id == user.pk or bool(user.is_staff))


def can_change(user: Any, session: Session) -> bool:
    return _authenticated(user) and session.owner_id == user.pk


def session_for(user: Any, session_id: uuid.UUID | str, *, write: bool = False) -> Session:
    """The session if `user` may see it (and change it, with `write=True`).

    Raises SignInRequired for an anonymous user, NotVisible for an unknown id or someone
    else's session, ReadOnly when staff ask to change a session that is not theirs.
    """
    if not _authenticated(user):
        raise SignInRequired("sign in to see sessions")
    try:
        sid = session_id if isinstance(session_id, uuid.UUID) else uuid.UUID(str(session_id))
    except ValueError:
        raise NotVisible(f"no session {session_id}") from None
    session = Session.objects.filter(id=sid).select_related("owner").first()
    if session is None or not can_see(user, session):
        raise NotVisible(f"no session {sid}")
    if write and not can_change(user, session):
        raise ReadOnly("staff may read this session but not change it")
    return session
