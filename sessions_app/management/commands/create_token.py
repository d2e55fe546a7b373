from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from sessions_app import services
from sessions_app.management.base import StrandCommand
from sessions_app.services import tokens


class Command(StrandCommand):
    help = (
        "Make a personal API token for USERNAME and print it (it is shown this once; only "
        "a digest is stored). Use it as 'Authorization: Bearer <token>'."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="command line", help="what the token is for")

    def handle(self, *args: Any, **options: Any) -> None:
        user = services.user_by_name(options["username"])
        if not user.is_active:
            raise CommandError(f"the account {options['username']!r} is disabled")
        _, plaintext = tokens.token_create(user, options["name"])
        self.stdout.write(plaintext)
