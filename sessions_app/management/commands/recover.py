from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from sessions_app import agent
from sessions_app.management.base import StrandCommand, session_by_id


class Command(StrandCommand):
    help = (
        "Close turns left open by processes that died (crash recovery): in the given "
        "sessions, or in every session with an open turn. Prints what it closed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_ids", nargs="*", metavar="SESSION_ID")

    def handle(self, *args: Any, **options: Any) -> None:
        sessions = [session_by_id(value).id for value in options["session_ids"]]
        try:
            reports = agent.agent_recover(sessions if options["session_ids"] else None)
        finally:
            agent.agent_shutdown()
        if not reports:
            self.stdout.write("no open turns")
        for report in reports:
            self.stdout.write(report.describe())
