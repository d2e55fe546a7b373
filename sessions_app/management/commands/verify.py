from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from sessions_app.management.base import StrandCommand, session_by_id
from sessions_app.models import Session
from sessions_app.verify import verify_session


class Command(StrandCommand):
    help = (
        "Rebuild every stored projection (entries, leaf, counters, request manifests) from the "
        "event log and compare. Exit status 1 names the first difference."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_ids", nargs="*", metavar="SESSION_ID")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["session_ids"]:
            sessions = [session_by_id(value) for value in options["session_ids"]]
        else:
            sessions = list(Session.objects.order_by("created_at"))
        for session in sessions:
            difference = verify_session(session)
            if difference is not None:
                raise CommandError(f"session {session.id}: {difference}")
        self.stdout.write(f"{len(sessions)} session(s) verified: the projections match the log")
