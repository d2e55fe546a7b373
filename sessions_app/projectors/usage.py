"""The usage rollups: `UsageCount` rows summed from each event's figures
(`projections.usage`), per owner, day (the server's time zone), session, provider and model."""

from __future__ import annotations

import uuid
import zoneinfo
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection

from projections.records import EventRecord
from projections.usage import event_figures
from sessions_app.projectors.runner import PendingSession

NAME = "usage"

_UPSERT = """
INSERT INTO sessions_app_usagecount
    (owner_id, day, session_id, provider, model, metric, label, value)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (owner_id, day, session_id, provider, model, metric, label)
DO UPDATE SET value = sessions_app_usagecount.value + EXCLUDED.value
"""


class UsageProjector:
    name = NAME

    def apply(self, session: PendingSession, events: Sequence[EventRecord]) -> None:
        zone = zoneinfo.ZoneInfo(settings.TIME_ZONE)
        sums: dict[tuple[Any, ...], Decimal] = {}
        for event in events:
            day = event.time.astimezone(zone).date()
            for f in event_figures(event.type, event.data):
                key = (session.owner_id, day, session.id, f.provider, f.model, f.metric, f.label)
                sums[key] = sums.get(key, Decimal(0)) + f.value
        if sums:
            with connection.cursor() as cur:
                # In key order: two writers of the same rows would lock them in one order.
                cur.executemany(
                    _UPSERT, [(*key, value) for key, value in sorted(sums.items(), key=str)]
                )

    def forget(self, session_id: uuid.UUID | str) -> None:
        with connection.cursor() as cur:
            cur.execute(
                "DELETE FROM sessions_app_usagecount WHERE session_id = %s", [str(session_id)]
            )
