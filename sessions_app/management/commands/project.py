"""`manage.py project [--once] [--lag]`: run the asynchronous projectors (search index,
usage rollups) here, as every server process also does."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import CommandError, CommandParser

from sessions_app.management.base import StrandCommand
from sessions_app.projectors import project_pending, projector_lag, registered
from sessions_app.projectors.service import POLL_S, try_lock

LOCK_WAIT_S = 30.0


class Command(StrandCommand):
    help = "Project committed events into the search index and the usage rollups."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--once", action="store_true", help="project what is pending, then exit"
        )
        parser.add_argument(
            "--lag", action="store_true", help="print each projector's lag, then exit"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["lag"]:
            for projector in registered():
                lag = projector_lag(projector.name)
                oldest = lag.oldest.isoformat() if lag.oldest else "-"
                self.stdout.write(
                    f"{lag.projector}: {lag.events} events in {lag.sessions} sessions "
                    f"behind (oldest {oldest})"
                )
            return
        if options["once"]:
            deadline = time.monotonic() + LOCK_WAIT_S
            while not try_lock():
                if time.monotonic() > deadline:
                    raise CommandError("another projector holds the lock; try again later")
                time.sleep(POLL_S)
            count = project_pending()
            self.stdout.write(f"projected {count} events")
            return
        while True:
            if try_lock():
                count = project_pending()
                if count:
                    self.stdout.write(f"projected {count} events", ending="\n")
                    self.stdout.flush()
            time.sleep(POLL_S / 4)
