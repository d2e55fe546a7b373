from __future__ import annotations

from typing import Any

from sessions_app.management.base import StrandCommand
from sessions_app.services import demo


class Command(StrandCommand):
    help = "Load the demo sessions into the local account (once; later runs change nothing)."

    def handle(self, *args: Any, **options: Any) -> None:
        created = demo.demo_load()
        for session in created:
            self.stderr.write(f"demo session: {session.title} ({session.id})")
