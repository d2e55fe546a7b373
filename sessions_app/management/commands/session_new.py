from __future__ import annotations

import os
from typing import Any

from django.core.management.base import CommandParser

from sessions_app import services, workspaces
from sessions_app.management.base import StrandCommand
from sessions_app.presets import preset_get


class Command(StrandCommand):
    help = "Create an empty session and print its id."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--title", default="")
        parser.add_argument("--owner", default=None, help="user name (default: the local account)")
        parser.add_argument(
            "--cwd",
            default="",
            help="the session's working directory: the owner's own folder (the default) or a "
            "folder in it or granted to them (STRAND_WORKSPACE_GRANTS)",
        )
        parser.add_argument(
            "--preset", default=None, help="agent preset name (default: offline; see presets.py)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        owner = services.user_by_name(options["owner"])
        preset = options["preset"]
        if preset is not None:
            preset_get(preset)  # an unknown name fails here, listing the names offered
        # A relative --cwd means the shell's directory, not the server's; it is checked as
        # the API checks it (operators grant other folders, STRAND_WORKSPACE_GRANTS).
        asked = os.path.abspath(options["cwd"]) if options["cwd"] else ""
        cwd = workspaces.cwd_for(owner, asked)
        session = services.session_create(
            owner=owner, title=options["title"], cwd=cwd, preset=preset
        )
        self.stdout.write(str(session.id))
