"""The turns of a session."""

from __future__ import annotations

from sessions_app.models import Event, Session


def turn_numbers(session: Session) -> list[int]:
    """The numbers of the session's turns, oldest first."""
    turns = (
        Event.objects.filter(session=session, type="turn/start", turn__isnull=False)
        .order_by("seq")
        .values_list("turn", flat=True)
    )
    return [t for t in turns if t is not None]
