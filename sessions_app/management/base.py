"""Shared plumbing for Strand's commands: one readable line and exit status 1 on bad input."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from sessions_app import selectors
from sessions_app.errors import DomainError
from sessions_app.models import Session


class StrandCommand(BaseCommand):
    """Turns the project's own errors into `CommandError` (one line on stderr, exit 1)."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except (DomainError, ValueError) as exc:
            raise CommandError(str(exc)) from None


def session_by_id(value: str) -> Session:
    try:
        sid = uuid.UUID(value)
    except ValueError:
        raise CommandError(f"{value!r} is not a session id (a UUID)") from None
    session = selectors.session_by_id(sid)
    if session is None:
        raise CommandError(f"no session {sid}")
    return session
