from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from projections.context import CONTEXT_FORMATS, UNSET
from sessions_app import selectors
from sessions_app.management.base import StrandCommand, session_by_id


class Command(StrandCommand):
    help = (
        "Print the model context of a session's leaf as JSON: --format pi gives exactly what "
        "Pi's buildSessionContext returns; --format llm Pi's convertToLlm of it (what Pi hands "
        "its provider); --format provider the messages Strand's own requests send."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_id")
        parser.add_argument(
            "--leaf",
            default=None,
            metavar="ENTRY_ID|null",
            help="the leaf to build for (default: the session's current leaf; null: no leaf)",
        )
        parser.add_argument("--format", choices=list(CONTEXT_FORMATS), default="pi")

    def handle(self, *args: Any, **options: Any) -> None:
        session = session_by_id(options["session_id"])
        leaf = options["leaf"]
        chosen = UNSET if leaf is None else (None if leaf == "null" else leaf)
        if isinstance(chosen, str) and not selectors.entry_exists(session, chosen):
            # As the API answers 400: an unknown leaf is an error, not the last entry's context.
            raise CommandError(f"{chosen!r} is not an entry of session {session.id}")
        context = selectors.session_context(session, chosen)
        if options["format"] == "pi":
            value: Any = context.to_pi()
        else:
            value = CONTEXT_FORMATS[options["format"]](context.messages)
        self.stdout.write(json.dumps(value, ensure_ascii=False, indent=2))
