from __future__ import annotations

import os
from typing import Any

from django.core.management.base import CommandParser

from sessions_app import services
from sessions_app.management.base import StrandCommand
from sessions_app.presets import preset_get


class Command(StrandCommand):
    help = "Create an empty session and print its id."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--title", default="")
        parser.add_argument("--owner", default=None, help="user name (default: the local account)")
        parser.add_argument("--cwd", default="", help="the session's working directory")
        parser.add_argument(
            "--preset", default=None, help="agent preset name (default: offline; see presets.py)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        owner = services.user_by_name(options["owner"])
        preset = preset_get(options["preset"]) if options["preset"] else None
        # A relative --cwd means the shell's directory, not the server's.
        cwd = os.path.abspath(options["cwd"]) if options["cwd"] else ""
        session = services.session_create(
            owner=owner, title=options["title"], cwd=cwd, preset=preset
        )
        self.stdout.write(str(session.id))
