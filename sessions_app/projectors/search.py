"""The search index: one `SearchDoc` row per searchable part of each entry
(`projections.search_text`), written by the projector off the append path."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from projections.records import EventRecord
from projections.search_text import entry_parts
from sessions_app.projectors.pending import PendingSession

NAME = "search"

# One statement for a whole batch's rows: each column passed as one array.
_INSERT = """
INSERT INTO sessions_app_searchdoc
    (session_id, owner_id, seq, part, entry_id, role, tool_name, is_error, model, time,
     text, norm)
SELECT * FROM unnest(
    %s::uuid[], %s::integer[], %s::bigint[], %s::smallint[], %s::varchar[], %s::varchar[],
    %s::varchar[], %s::boolean[], %s::varchar[], %s::timestamptz[], %s::text[], %s::text[])
"""


class SearchProjector:
    name = NAME

    def apply(self, batch: Sequence[tuple[PendingSession, Sequence[EventRecord]]]) -> None:
        rows = [
            row
            for session, events in batch
            for event in events
            for row in doc_rows(session.id, session.owner_id, event)
        ]
        if rows:
            with connection.cursor() as cur:
                cur.execute(_INSERT, [list(column) for column in zip(*rows, strict=True)])

    def forget(self, session_id: uuid.UUID | str) -> None:
        with connection.cursor() as cur:
            cur.execute(
                "DELETE FROM sessions_app_searchdoc WHERE session_id = %s", [str(session_id)]
            )


def doc_rows(session_id: uuid.UUID, owner_id: int, event: EventRecord) -> list[tuple[Any, ...]]:
    entry = event.data.get("entry")
    if not isinstance(entry, Mapping):
        return []
    entry_id = entry.get("id") if isinstance(entry.get("id"), str) else event.entry_id
    if not entry_id:
        return []
    time = entry_time(entry.get("timestamp"), event.time)
    return [
        (
            session_id,
            owner_id,
            event.seq,
            p.part,
            entry_id,
            p.role,
            p.tool_name[:128],
            p.is_error,
            p.model[:128],
            time,
            p.text,
            p.normalised,
        )  # fmt: skip
        for p in entry_parts(entry)
    ]


def entry_time(timestamp: Any, fallback: datetime) -> datetime:
    """An entry's own timestamp (ISO, as Pi writes it), else the event's time."""
    if isinstance(timestamp, str):
        try:
            moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
        except ValueError:
            return fallback
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        if 1 <= moment.year <= 9998:
            return moment
    return fallback
