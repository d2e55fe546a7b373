"""The usage rollups: `UsageCount` rows summed from each event's figures
(`projections.usage`), per owner, day (the server's time zone), session, provider and model."""

from __future__ import annotations

import uuid
import zoneinfo
from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection

from projections.records import EventRecord
from projections.usage import event_figures
from sessions_app.projectors.pending import PendingSession

NAME = "usage"

_UPSERT = """
INSERT INTO sessions_app_usagecount
    (owner_id, day, session_id, provider, model, metric, label, value)
SELECT * FROM unnest(
    %s::integer[], %s::date[], %s::uuid[], %s::varchar[], %s::varchar[], %s::varchar[],
    %s::varchar[], %s::numeric[])
ON CONFLICT (owner_id, day, session_id, provider, model, metric, label)
DO UPDATE SET value = sessions_app_usagecount.value + EXCLUDED.value
"""


class UsageProjector:
    name = NAME

    def apply(self, batch: Sequence[tuple[PendingSession, Sequence[EventRecord]]]) -> None:
        sums: dict[Key, Decimal] = {}
        for session, events in batch:
            sums.update(usage_sums(session.id, session.owner_id, events))
        if sums:
            with connection.cursor() as cur:
                # One statement for the batch, each column one array; in key order: two
                # writers of the same rows would lock them in one order.
                rows = [(*key, value) for key, value in sorted(sums.items(), key=str)]
                cur.execute(_UPSERT, [list(column) for column in zip(*rows, strict=True)])

    def forget(self, session_id: uuid.UUID | str) -> None:
        with connection.cursor() as cur:
            cur.execute(
                "DELETE FROM sessions_app_usagecount WHERE session_id = %s", [str(session_id)]
            )


Key = tuple[
    int, date, uuid.UUID, str, str, str, str
]  # owner, day, session, provider, model, metric, label


def usage_sums(
    session_id: uuid.UUID, owner_id: int, events: Sequence[EventRecord]
) -> dict[Key, Decimal]:
    """What `events` (of one session) add to the rollups, summed by key. A request
    (`request/sent`) counts under the provider and model of the header it names."""
    zone = zoneinfo.ZoneInfo(settings.TIME_ZONE)
    headers = _Headers(session_id, events)
    sums: dict[Key, Decimal] = {}
    for event in events:
        day = event.time.astimezone(zone).date()
        for f in event_figures(event.type, event.data):
            provider, model = f.provider, f.model
            if event.type == "request/sent":
                provider, model = headers.of(event.data.get("header_seq"))
            key = (owner_id, day, session_id, provider, model, f.metric, f.label)
            sums[key] = sums.get(key, Decimal(0)) + f.value
    return sums


class _Headers:
    """The provider and model of a session's request headers, from the events at hand or,
    for a header written before them, from the log (by the (session, seq) key)."""

    def __init__(self, session_id: uuid.UUID, events: Sequence[EventRecord]) -> None:
        self.session_id = session_id
        self.known: dict[int, tuple[str, str]] = {
            e.seq: (_text(e.data.get("provider")), _text(e.data.get("model")))
            for e in events
            if e.type == "request/header"
        }

    def of(self, seq: Any) -> tuple[str, str]:
        if not isinstance(seq, int):
            return ("", "")
        if seq not in self.known:
            with connection.cursor() as cur:
                cur.execute(
                    "SELECT data ->> 'provider', data ->> 'model' FROM sessions_app_event "
                    "WHERE session_id = %s AND seq = %s AND type = 'request/header'",
                    [self.session_id, seq],
                )
                row = cur.fetchone()
            self.known[seq] = (_text(row[0]), _text(row[1])) if row else ("", "")
        return self.known[seq]


def _text(value: Any) -> str:
    return value[:128] if isinstance(value, str) else ""
