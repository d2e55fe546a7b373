"""Shared plumbing for Strand's commands: one readable line and exit status 1 on bad input."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from sessions_app import selectors
from sessions_app.bad_input import BadInput, check_text
from sessions_app.errors import DomainError
from sessions_app.models import Session


class StrandCommand(BaseCommand):
    """Turns the project's own errors into `CommandError` (one line on stderr, exit 1).

    Arguments are checked before the command runs: text Postgres cannot store (a lone
    surrogate is how Python hands over bytes of an argument that are not UTF-8) and a
    number past any seq are refused, as the web's doors refuse them."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            for name, value in [("argument", a) for a in args] + list(options.items()):
                _check_argument(name, value)
            return super().execute(*args, **options)
        except (DomainError, ValueError) as exc:
            raise CommandError(str(exc)) from None


NUMBER_MAX = 2**62  # a seq, a count, a limit: more overflows the database's bigint


def _check_argument(name: str, value: Any) -> None:
    what = f"--{name.replace('_', '-')}" if name != "argument" else "an argument"
    for item in value if isinstance(value, list | tuple) else [value]:
        if isinstance(item, str):
            check_text(item, what)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > NUMBER_MAX:
            raise BadInput(f"{what} is out of range")


def session_by_id(value: str) -> Session:
    try:
        sid = uuid.UUID(value)
    except ValueError:
        raise CommandError(f"{value!r} is not a session id (a UUID)") from None
    session = selectors.session_by_id(sid)
    if session is None:
        raise CommandError(f"no session {sid}")
    return session
