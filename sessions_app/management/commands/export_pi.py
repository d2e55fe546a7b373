from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandParser

from sessions_app.management.base import StrandCommand, session_by_id
from sessions_app.services import pi_io


class Command(StrandCommand):
    help = "Write a session as a Pi v3 session file (standard output, or -o FILE)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_id")
        parser.add_argument("-o", "--output", default=None, metavar="FILE")

    def handle(self, *args: Any, **options: Any) -> None:
        session = session_by_id(options["session_id"])
        lines = pi_io.pi_export_lines(session)
        if options["output"] is None:
            for line in lines:
                self.stdout.write(line, ending="")
            return
        target = Path(options["output"])
        partial = target.with_name(target.name + ".partial")
        with partial.open("w", encoding="utf-8") as out:
            for line in lines:
                out.write(line)
        partial.replace(target)  # a reader never sees half a file
