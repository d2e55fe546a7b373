from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from projections.pi_file import PiWarning
from sessions_app import services, workspaces
from sessions_app.management.base import StrandCommand
from sessions_app.services import pi_io


class Command(StrandCommand):
    help = (
        "Import Pi session files (v1, v2, v3). Prints one session id per file, in argument "
        "order; warnings and progress go to standard error. Each file imports whole or not at all."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", metavar="FILE")
        parser.add_argument("--owner", default=None, help="user name (default: the local account)")
        parser.add_argument(
            "--strict", action="store_true", help="treat lines Pi would skip as errors"
        )
        parser.add_argument(
            "--cwd",
            default=None,
            help="the sessions' working directory: the owner's own folder (the default) or a "
            "folder in it or granted to them (STRAND_WORKSPACE_GRANTS); never the cwd a file names",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        owner = services.user_by_name(options["owner"])
        # The command follows the rule the API does: an operator who wants a session
        # elsewhere grants the folder to its owner first. A relative --cwd is the shell's.
        cwd = options["cwd"]
        if cwd is not None:
            cwd = workspaces.cwd_for(owner, os.path.abspath(cwd))
        paths = [Path(f) for f in options["files"]]
        for path in paths:
            if not path.is_file():
                raise CommandError(f"{path}: no such file")
        for path in paths:
            with path.open("rb") as source:
                bar = _ProgressBar(path.name, pi_io.file_size(source))
                try:
                    result = pi_io.pi_import(
                        source=source,
                        owner=owner,
                        name=path.stem,
                        cwd=cwd,
                        strict=options["strict"],
                        on_warning=partial(self._warn, path),
                        progress=bar.update,
                    )
                except pi_io.PiImportError as exc:
                    bar.clear()
                    raise CommandError(f"{path}: {exc}") from None
                bar.clear()
            self.stdout.write(str(result.session.id))
            self.stdout.flush()

    def _warn(self, path: Path, warning: PiWarning) -> None:
        self.stderr.write(f"{path}: warning: {warning}")


class _ProgressBar:
    """A one-line bar on standard error, drawn only on a terminal and for files over 1 MB."""

    def __init__(self, name: str, total: int) -> None:
        self.name = name
        self.total = total
        self.enabled = sys.stderr.isatty() and total > 1_000_000
        self.drawn = False

    def update(self, done: int, entries: int) -> None:
        if not self.enabled:
            return
        share = min(done / self.total, 1.0) if self.total else 1.0
        filled = int(share * 30)
        sys.stderr.write(
            f"\r{self.name} [{'#' * filled}{'.' * (30 - filled)}] {share:4.0%} {entries:,} entries"
        )
        sys.stderr.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()
