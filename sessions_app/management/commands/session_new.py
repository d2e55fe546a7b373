from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from sessions_app import services
from sessions_app.management.base import StrandCommand


class Command(StrandCommand):
    help = "Create an empty session and print its id."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--title", default="")
        parser.add_argument("--owner", default=None, help="user name (default: the local account)")
        parser.add_argument("--cwd", default="", help="the session's working directory")

    def handle(self, *args: Any, **options: Any) -> None:
        owner = services.user_by_name(options["owner"])
        session = services.session_create(owner=owner, title=options["title"], cwd=options["cwd"])
        self.stdout.write(str(session.id))
