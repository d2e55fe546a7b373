from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from sessions_app import selectors
from sessions_app.management.base import StrandCommand, session_by_id


class Command(StrandCommand):
    help = "Print a session's events, one JSON object per line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_id")
        parser.add_argument("--after", type=int, default=-1, help="only events with seq > N")
        parser.add_argument("--limit", type=int, default=None, help="at most N events")

    def handle(self, *args: Any, **options: Any) -> None:
        session = session_by_id(options["session_id"])
        after, remaining = options["after"], options["limit"]
        if remaining is not None and remaining < 0:
            raise ValueError("--limit must not be negative")
        while remaining is None or remaining > 0:
            page = min(1000, remaining) if remaining is not None else 1000
            records = selectors.events_after(session.id, after, page)
            for record in records:
                line = {
                    "seq": record.seq,
                    "type": record.type,
                    "time": record.time.isoformat(),
                    "data": record.data,
                    "entry_id": record.entry_id,
                    "turn": record.turn,
                    "step": record.step,
                }
                self.stdout.write(json.dumps(line, ensure_ascii=False))
            if len(records) < page:
                break
            after = records[-1].seq
            if remaining is not None:
                remaining -= len(records)
