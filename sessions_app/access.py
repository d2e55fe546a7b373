"""Who may see and change a session: the one place that decides.

A session is visible to its owner and to staff. Its owner may change it; staff may only
read it. Everyone else is told the session does not exist (not that it is forbidden), so
that ids of other people's sessions leak nothing. The API, the pages, the websockets, search
and exports all call these functions.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet

from sessions_app.errors import DomainError
from sessions_app.models import Session


class NotVisible(DomainError):
    """No such session, or not one this user may see (the two are not told apart)."""

    code = "not_found"


class ReadOnly(DomainError):
    """A user who may see the session but not change it (staff)."""

    code = "forbidden"


class SignInRequired(DomainError):
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


def signed_in(user: Any) -> Any:
    """`user` if signed in, else SignInRequired: for actions that need no session."""
    if not _authenticated(user):
        raise SignInRequired("sign in, or send an API token as 'Authorization: Bearer …'")
    return user


# --- what a client may write --------------------------------------------------------------


class NotAllowed(DomainError):
    """A value the client may not choose (an event type the runtime writes, a working
    directory outside the allowed roots, a preset that is not offered)."""

    code = "not_allowed"


# Event types a client may append through the API: entries (a program recording its own
# agent's conversation, as a Pi import does), leaf moves and renames. Turns, steps, model
# requests, tool calls, approvals and inbox items are written by the runtime alone, so that
# the trace and the request audit show what the runtime did, not what a client claimed.
_CLIENT_EVENT_TYPES = frozenset(
    {"user/message", "assistant/message", "tool/result", "leaf/moved", "session/renamed"}
)


# Fields of an event's data that number it into a turn and a step (the store reads them
# into the event's `turn` and `step`). Only the runtime numbers turns, so a client event
# that names one is refused rather than stripped: the client learns that its event would
# not mean what it said, and the trace never shows a turn the runtime did not run.
_RUNTIME_FIELDS = ("turn", "step")


def check_client_event(event_type: str, data: Mapping[str, Any] | None = None) -> None:
    if not (event_type in _CLIENT_EVENT_TYPES or event_type.startswith("entry/")):
        raise NotAllowed(
            f"events of type {event_type!r} are written by the runtime, not through the API"
        )
    named = [key for key in _RUNTIME_FIELDS if data and key in data]
    if named:
        raise NotAllowed(
            f"an event appended through the API cannot set {' or '.join(named)}: "
            "turns and steps are numbered by the runtime"
        )
    if data and "orphan" in data:
        # Refused, not dropped: an orphan (an entry whose parent names no entry) is what a
        # Pi import finds in a file, never a client's claim; a client's entry hangs below
        # an entry that exists.
        raise NotAllowed(
            "an event appended through the API cannot set orphan: only a Pi import marks "
            "entries whose parent is missing"
        )


def check_preset(name: str | None) -> str:
    """The name of the preset a client asked for (None: the default), if the server offers
    it. A client names a preset and never sends one: a preset says where model requests go
    and which environment variable holds the key, so only the server's own presets
    (`sessions_app.presets`) may be chosen, and each turn looks the name up again."""
    from sessions_app.presets import OFFLINE, PresetNotFound, preset_get

    if name is None:
        return OFFLINE
    try:
        preset_get(name)
    except PresetNotFound as exc:
        raise NotAllowed(str(exc)) from None
    return name
